/* elaborate.c - from the syntax tree to the graph.
 *
 * The DSL is run as a small interpreter whose only side effect is adding
 * nodes: calls to user functions are inlined, loops unrolled and scalar
 * arithmetic folded, so what comes out is a flat dataflow graph.
 *
 * Names.  Each call of a user function opens a frame whose path is the
 * caller's path plus the callee's name and a per-caller counter
 * (stage2_block1_conv2).  When a frame ends, the ops it created directly are
 * named: a wrapper, a function that made exactly one op and called no other
 * function, gives it its own path (so the Convolution made by conv() is
 * stage2_block1_conv2); otherwise each op is <path>_<prefix><k> (the add of
 * every block is stage1_blockK_plus1), the counter shared with calls so
 * names cannot clash.
 * Implicit parameters are <node>_<suffix> (MXNet's weight, bias, gamma,
 * beta, moving_mean, moving_var).  name="..." overrides a node's name.
 *
 * Limits (call depth, loop length, node count, evaluation depth) turn
 * runaway programs into located errors instead of hangs or stack overflows. */
#include "passes.h"
#include "../runtime/settings.h"

#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

/* ---- values ---------------------------------------------------------------- */

typedef enum { V_NONE, V_INT, V_FLOAT, V_BOOL, V_STR, V_SYM, V_TUPLE, V_TENSOR } VKind;

typedef struct Value Value;
struct Value {
    VKind k;
    int64_t i;      /* V_INT; V_TENSOR: node id */
    double f;       /* V_FLOAT */
    bool b;         /* V_BOOL */
    const char *s;  /* V_STR, V_SYM (dtype names, initialisers) */
    int n;          /* V_TUPLE */
    Value *items;   /* V_TUPLE (shared, never copied: t = (t, t) is cheap) */
    int depth;      /* V_TUPLE: nesting, 1 for a tuple of scalars */
    int64_t size;   /* V_TUPLE: values held, nested tuples' counted (with repeats) */
};

static const char *vkind_name(VKind k)
{
    static const char *const names[] = {"none", "int", "float", "bool", "string", "symbol",
                                        "tuple", "tensor"};
    return names[k];
}

/* ---- interpreter state -------------------------------------------------------- */

typedef struct Var {
    const char *name;
    Value v;
    struct Var *next;
} Var;

typedef struct Frame {
    const char *path;   /* "" for the model body */
    int diag_frame;     /* Diag call frame, -1 for the model body */
    Var *vars;          /* newest first (did-you-mean walks them) */
    int nvars;
    StrMap var_index;   /* past FRAME_WALK_MAX variables, name -> index in var_ptrs */
    Vec var_ptrs;       /* Var *, once indexed */
    StrMap counters;    /* base name -> uses so far */
    Vec ops;            /* int: node ids created directly in this frame */
    const AstNode *fn;  /* the def, or NULL for the model */
    struct Frame *parent;
    int ncalls;         /* user functions this frame called */
} Frame;

typedef struct {
    Diag *d;
    Graph *g;
    Arena tmp;          /* values, frame paths: freed at the end */
    const ElabOptions *opt;
    StrMap defs;        /* function name -> index in prog decls */
    const AstProgram *prog;
    Frame *frame;
    int call_depth, eval_depth;
    uintptr_t stack_base; /* frame address of elaborate(): the C stack in use is below */
    int64_t work;
    int64_t probes;     /* slots the name tables looked at (ElabOptions.probes) */
    int batch_sym_seen; /* the model's symbolic batch dimension is named */
    jmp_buf fail;       /* errors unwind here: everything lives in arenas */
} Elab;

/* NODE_STEPS: a node (and its name) costs what a few steps do */
enum { MAX_EVAL_DEPTH = 4000, MAX_WORK = 10000000, MAX_NODES = 1000000, NODE_STEPS = 4,
       MAX_TUPLE_DEPTH = 64,
       MAX_TUPLE_SIZE = 1000000, MAX_STRING = 1 << 20,
       MAX_STACK = 4 << 20 /* bytes: half of the usual 8 MiB main-thread stack */ };
#define MAX_MEMORY ((int64_t)1 << 30)

static _Noreturn void fail(Elab *e) { longjmp(e->fail, 1); }

static _Noreturn void error_at(Elab *e, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static _Noreturn void error_at(Elab *e, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_verror_in(e->d, loc, e->frame ? e->frame->diag_frame : -1, fmt, ap);
    va_end(ap);
    fail(e);
}

/* Memory: what the arenas of the elaboration (values, frame paths, the
 * graph, call frames) hold, plus `more` bytes about to be allocated.  Strings
 * grow by '+' and paths by nested calls, so the step count alone does not
 * bound it (s = s + s doubles s at each step). */
static void charge(Elab *e, Loc loc, size_t more)
{
    int64_t limit = e->opt->max_memory ? e->opt->max_memory : MAX_MEMORY;
    size_t used = e->tmp.total + e->d->arena.total + (size_t)e->d->frames.len * sizeof(CallFrame) +
                  (e->g ? e->g->arena.total : 0);
    if (used > (size_t)limit || more > (size_t)limit - used)
        error_at(e, loc, "elaboration needs more than its limit of %lld MiB (values, names and "
                         "nodes): is a loop, a recursion or a string too long?",
                 (long long)(limit >> 20));
}

/* Work: every statement, loop iteration, call and expression evaluated is a
 * step, and a node NODE_STEPS, so the limit bounds the time any input can
 * take (about 50 ns a step: the default is about half a second of
 * interpretation; a 10,000-block ResNet takes 2.6 million).  An exponential
 * recursion (f(n-1) + f(n-1)) is stopped here. */
static void tick_n(Elab *e, Loc loc, int steps)
{
    int64_t limit = e->opt->max_work ? e->opt->max_work : MAX_WORK;
    if ((e->work += steps) > limit)
        error_at(e, loc, "elaboration takes more than its limit of %lld steps (statements, loop "
                         "iterations, calls, expressions evaluated, nodes made): is a loop too "
                         "long, or a recursion exponential?",
                 (long long)limit);
    charge(e, loc, 0);
}

static void tick(Elab *e, Loc loc) { tick_n(e, loc, 1); }

/* ---- did-you-mean (ir/diag.c's Suggest) ------------------------------------- */

static const char *suggest_text(Elab *e, const Suggest *s)
{
    return s->best ? arena_printf(&e->tmp, " (did you mean '%s'?)", s->best) : "";
}

/* ---- variables ----------------------------------------------------------------- */

/* A frame's variables are found through a hash map once it has more than
 * FRAME_WALK_MAX of them: a model of n statements (an imported chain of a
 * million ops) elaborates in time linear in n, not n^2 as a walk of the
 * list did.  A smaller frame (most calls of a recursion) walks its few
 * variables and allocates no table. */
enum { FRAME_WALK_MAX = 8 };

static Value *lookup(Elab *e, const char *name)
{
    Frame *f = e->frame;
    if (f->var_index.cap) {
        int *k = strmap_get(&f->var_index, name);
        return k ? &VEC_AT(f->var_ptrs, Var *, *k)->v : NULL;
    }
    for (Var *v = f->vars; v; v = v->next) {
        e->probes++;
        if (strcmp(v->name, name) == 0)
            return &v->v;
    }
    return NULL;
}

static void index_var(Frame *f, Var *var)
{
    strmap_put(&f->var_index, var->name, f->var_ptrs.len);
    *(Var **)vec_push(&f->var_ptrs, sizeof(Var *)) = var;
}

static void assign(Elab *e, const char *name, Value v)
{
    Value *slot = lookup(e, name);
    if (slot) {
        *slot = v;
        return;
    }
    Frame *f = e->frame;
    Var *var = arena_alloc(&e->tmp, sizeof *var);
    var->name = name;
    var->v = v;
    var->next = f->vars;
    f->vars = var;
    if (++f->nvars == FRAME_WALK_MAX + 1)
        for (Var *v = f->vars; v; v = v->next)
            index_var(f, v);
    else if (f->nvars > FRAME_WALK_MAX)
        index_var(f, var);
}

static int next_count(Frame *f, const char *base)
{
    int *c = strmap_get(&f->counters, base);
    if (c)
        return ++*c;
    strmap_put(&f->counters, base, 1);
    return 1;
}

/* ---- builtin names ------------------------------------------------------------- */

static const char *const init_names[] = {"zero", "one", NULL};
static const char *const init_funcs[] = {"msra_prelu", "xavier", "uniform", "normal", "constant",
                                         NULL};

static bool in_list(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (strcmp(*list, s) == 0)
            return true;
    return false;
}

/* ---- graph building -------------------------------------------------------------- */

static Node *add_node(Elab *e, OpKind op, const int *in, int nin, Loc loc)
{
    int64_t limit = e->opt->max_nodes ? e->opt->max_nodes : MAX_NODES;
    if (e->g->nnodes >= limit)
        error_at(e, loc, "the model has more than its limit of %lld nodes", (long long)limit);
    tick_n(e, loc, NODE_STEPS);
    Node *n = graph_add(e->g, op, in, nin, loc, e->frame->diag_frame);
    return n;
}

static void record_op(Elab *e, Node *n)
{
    *(int *)vec_push(&e->frame->ops, sizeof(int)) = n->id;
}

static void name_node(Elab *e, Node *n, const char *name)
{
    if (graph_set_name(e->g, n, name))
        return;
    const Node *other = graph_find(e->g, name);
    const SrcFile *f = diag_file(e->d, other->loc.file);
    error_at(e, n->loc, "duplicate name '%s' (already used by %s at %s:%d:%d)", name,
             op_info(other->op)->name, f ? f->path : "?", other->loc.line, other->loc.col);
}

/* Names a node created in the frame being closed, then its unnamed
 * parameter inputs after it. */
static void name_op_and_params(Elab *e, Node *n, const char *name)
{
    if (!n->name)
        name_node(e, n, name);
    const OpInfo *oi = op_info(n->op);
    for (int s = 0; s < n->nin; s++) {
        Node *p = e->g->nodes[n->in[s]];
        if (p->op != OP_Param || p->name)
            continue;
        if (s >= oi->nslots) { /* a variadic op (Concat): MXNet's arg0, arg1, ... */
            name_node(e, p, arena_printf(&e->tmp, "%s_arg%d", n->name, s));
            continue;
        }
        const SlotSpec *ss = &oi->slots[s];
        name_node(e, p, arena_printf(&e->tmp, "%s_%s", n->name, ss->suffix ? ss->suffix : ss->name));
    }
}

static void close_frame_names(Elab *e, Frame *f)
{
    int nops = f->ops.len;
    for (int i = 0; i < nops; i++) {
        Node *n = e->g->nodes[VEC_AT(f->ops, int, i)];
        const char *name;
        if (n->name)
            name = n->name;
        else if (nops == 1 && f->ncalls == 0 && f->fn && !graph_find(e->g, f->path))
            name = f->path;
        else {
            /* skip names the user took with name="..." or for an input */
            const char *prefix = op_info(n->op)->prefix;
            do {
                int k = next_count(f, prefix);
                name = *f->path ? arena_printf(&e->tmp, "%s_%s%d", f->path, prefix, k)
                                : arena_printf(&e->tmp, "%s%d", prefix, k);
            } while (graph_find(e->g, name));
        }
        name_op_and_params(e, n, name);
    }
}

/* ---- evaluation ------------------------------------------------------------------- */

static Value eval(Elab *e, const AstNode *x);
static Value call(Elab *e, const AstNode *x);

static Value v_int(int64_t i) { return (Value){.k = V_INT, .i = i}; }
static Value v_float(double f) { return (Value){.k = V_FLOAT, .f = f}; }
static Value v_bool(bool b) { return (Value){.k = V_BOOL, .b = b}; }
static Value v_tensor(int id) { return (Value){.k = V_TENSOR, .i = id}; }

static bool is_num(const Value *v) { return v->k == V_INT || v->k == V_FLOAT; }
static double num(const Value *v) { return v->k == V_INT ? (double)v->i : v->f; }

static Value scalar_op(Elab *e, Loc loc, OpKind op, int tensor, double s)
{
    Node *n = add_node(e, op, &tensor, 1, loc);
    n->attrs[SCALAR_SCALAR].f = s;
    record_op(e, n);
    return v_tensor(n->id);
}

static Value tensor_binary(Elab *e, const AstNode *x, const Value *a, const Value *b)
{
    char opc = (char)x->op;
    if (a->k == V_TENSOR && b->k == V_TENSOR) {
        OpKind op = opc == '+' ? OP_elemwise_add : opc == '-' ? OP_elemwise_sub
                  : opc == '*' ? OP_elemwise_mul : OP_COUNT;
        if (op == OP_COUNT)
            error_at(e, x->loc, "operator '%c' is not defined on two tensors", opc);
        int in[2] = {(int)a->i, (int)b->i};
        Node *n = add_node(e, op, in, 2, x->loc);
        record_op(e, n);
        return v_tensor(n->id);
    }
    const Value *t = a->k == V_TENSOR ? a : b, *s = a->k == V_TENSOR ? b : a;
    if (!is_num(s))
        error_at(e, x->loc, "operator '%c' between a tensor and a %s", opc, vkind_name(s->k));
    bool right = a->k == V_TENSOR; /* tensor OP scalar */
    OpKind op;
    switch (opc) {
    case '+': op = OP__plus_scalar; break;
    case '-': op = right ? OP__minus_scalar : OP__rminus_scalar; break;
    case '*': op = OP__mul_scalar; break;
    case '/': op = right ? OP__div_scalar : OP__rdiv_scalar; break;
    default: error_at(e, x->loc, "operator '%c' is not defined on tensors", opc);
    }
    return scalar_op(e, x->loc, op, (int)t->i, num(s));
}

static Value int_arith(Elab *e, const AstNode *x, int64_t a, int64_t b)
{
    int64_t r = 0;
    bool ovf = false;
    switch (x->op) {
    case '+': ovf = __builtin_add_overflow(a, b, &r); break;
    case '-': ovf = __builtin_sub_overflow(a, b, &r); break;
    case '*': ovf = __builtin_mul_overflow(a, b, &r); break;
    case '/':
    case '%':
        if (b == 0)
            error_at(e, x->loc, "integer division by zero");
        if (a == INT64_MIN && b == -1)
            ovf = x->op == '/'; /* the remainder is 0; only the quotient overflows */
        else
            r = x->op == '/' ? a / b : a % b;
        break;
    }
    if (ovf)
        error_at(e, x->loc, "integer overflow in '%c'", (char)x->op);
    return v_int(r);
}

static bool values_equal(const Value *a, const Value *b)
{
    if (is_num(a) && is_num(b))
        return a->k == V_INT && b->k == V_INT ? a->i == b->i : num(a) == num(b);
    if (a->k != b->k)
        return false;
    switch (a->k) {
    case V_BOOL: return a->b == b->b;
    case V_STR:
    case V_SYM: return strcmp(a->s, b->s) == 0;
    case V_TENSOR: return a->i == b->i;
    case V_NONE: return true;
    case V_TUPLE:
        if (a->n != b->n)
            return false;
        for (int i = 0; i < a->n; i++)
            if (!values_equal(&a->items[i], &b->items[i]))
                return false;
        return true;
    default: return false;
    }
}

static bool truth(Elab *e, const AstNode *x, const Value *v, const char *what)
{
    if (v->k != V_BOOL)
        error_at(e, x->loc, "%s must be a bool, got %s", what, vkind_name(v->k));
    return v->b;
}

static Value eval_binary(Elab *e, const AstNode *x)
{
    if (x->op == AOP_AND || x->op == AOP_OR) {
        Value a = eval(e, x->a);
        bool av = truth(e, x->a, &a, "an operand of && and ||");
        if (x->op == AOP_AND ? !av : av)
            return v_bool(av);
        Value b = eval(e, x->b);
        return v_bool(truth(e, x->b, &b, "an operand of && and ||"));
    }
    Value a = eval(e, x->a), b = eval(e, x->b);
    switch (x->op) {
    case AOP_EQ: return v_bool(values_equal(&a, &b));
    case AOP_NE: return v_bool(!values_equal(&a, &b));
    case '<': case '>': case AOP_LE: case AOP_GE: {
        if (!is_num(&a) || !is_num(&b))
            error_at(e, x->loc, "comparison needs numbers, got %s and %s", vkind_name(a.k),
                     vkind_name(b.k));
        bool ints = a.k == V_INT && b.k == V_INT;
        int c = ints ? (a.i > b.i) - (a.i < b.i) : (num(&a) > num(&b)) - (num(&a) < num(&b));
        return v_bool(x->op == '<' ? c < 0 : x->op == '>' ? c > 0 : x->op == AOP_LE ? c <= 0 : c >= 0);
    }
    default: break;
    }
    if (a.k == V_TENSOR || b.k == V_TENSOR)
        return tensor_binary(e, x, &a, &b);
    if (x->op == '+' && a.k == V_STR && b.k == V_STR) {
        size_t len = strlen(a.s) + strlen(b.s);
        if (len > MAX_STRING)
            error_at(e, x->loc, "string too long (more than %d bytes)", MAX_STRING);
        charge(e, x->loc, len + 1);
        size_t la = strlen(a.s);
        char *cat = arena_alloc(&e->tmp, len + 1);
        memcpy(cat, a.s, la);
        memcpy(cat + la, b.s, len - la + 1);
        return (Value){.k = V_STR, .s = cat};
    }
    if (!is_num(&a) || !is_num(&b))
        error_at(e, x->loc, "operator '%c' is not defined on %s and %s", (char)x->op,
                 vkind_name(a.k), vkind_name(b.k));
    if (a.k == V_INT && b.k == V_INT)
        return int_arith(e, x, a.i, b.i);
    double p = num(&a), q = num(&b), r = 0;
    switch (x->op) {
    case '+': r = p + q; break;
    case '-': r = p - q; break;
    case '*': r = p * q; break;
    case '/':
        if (q == 0)
            error_at(e, x->loc, "division by zero");
        r = p / q;
        break;
    default: error_at(e, x->loc, "operator '%%' needs integers");
    }
    /* inf or nan would become an attribute no schema range admits */
    if (!isfinite(r))
        error_at(e, x->loc, "floating-point overflow in '%c'", (char)x->op);
    return v_float(r);
}

static Value eval_unary(Elab *e, const AstNode *x)
{
    Value a = eval(e, x->a);
    if (x->op == '!')
        return v_bool(!truth(e, x->a, &a, "the operand of '!'"));
    switch (a.k) {
    case V_INT:
        if (a.i == INT64_MIN)
            error_at(e, x->loc, "integer overflow in unary '-'");
        return v_int(-a.i);
    case V_FLOAT: return v_float(-a.f);
    case V_TENSOR: return scalar_op(e, x->loc, OP__mul_scalar, (int)a.i, -1.0);
    default: error_at(e, x->loc, "unary '-' is not defined on %s", vkind_name(a.k));
    }
}

static Value eval_ident(Elab *e, const AstNode *x)
{
    Value *v = lookup(e, x->str);
    if (v)
        return *v;
    DType dt = dtype_parse(x->str);
    if (dt != DT_UNKNOWN && strcmp(dtype_long(dt), x->str) == 0)
        return (Value){.k = V_SYM, .s = dtype_long(dt)};
    if (in_list(init_names, x->str))
        return (Value){.k = V_SYM, .s = x->str};
    Suggest s = {0};
    for (Var *var = e->frame->vars; var; var = var->next)
        suggest_try(&s, x->str, var->name);
    for (int t = DT_UNKNOWN + 1; t < DT_COUNT; t++)
        suggest_try(&s, x->str, dtype_long((DType)t));
    for (int k = 0; init_names[k]; k++)
        suggest_try(&s, x->str, init_names[k]);
    if (strmap_get(&e->defs, x->str))
        error_at(e, x->loc, "'%s' is a function: call it with ()", x->str);
    error_at(e, x->loc, "undefined name '%s'%s", x->str, suggest_text(e, &s));
}

static Value eval(Elab *e, const AstNode *x)
{
    /* Nesting is bounded in levels and, since a level's frame size depends
     * on the build (sanitizers make frames several times bigger), in bytes. */
    if (e->stack_base - (uintptr_t)__builtin_frame_address(0) > MAX_STACK)
        error_at(e, x->loc, "expressions nested too deeply for the elaborator's %d KiB of stack "
                            "(counted across nested calls)", MAX_STACK >> 10);
    /* each function body may nest AST_MAX_DEPTH levels: this bounds the sum
     * over the calls in progress */
    if (++e->eval_depth > MAX_EVAL_DEPTH)
        error_at(e, x->loc, "expressions nested too deeply, counted across nested calls (more "
                            "than %d levels)", MAX_EVAL_DEPTH);
    tick(e, x->loc);
    Value r = {0};
    switch (x->kind) {
    case AST_INT: r = v_int(x->ival); break;
    case AST_FLOAT: r = v_float(x->fval); break;
    case AST_BOOL: r = v_bool(x->bval); break;
    case AST_STR: r = (Value){.k = V_STR, .s = x->str}; break;
    case AST_IDENT: r = eval_ident(e, x); break;
    case AST_TUPLE:
        r.k = V_TUPLE;
        r.n = x->list.n;
        r.items = arena_alloc(&e->tmp, sizeof(Value) * (size_t)(r.n ? r.n : 1));
        r.depth = 1;
        r.size = r.n;
        for (int i = 0; i < r.n; i++) {
            r.items[i] = eval(e, x->list.items[i]);
            if (r.items[i].k == V_TUPLE) {
                r.depth = r.items[i].depth + 1 > r.depth ? r.items[i].depth + 1 : r.depth;
                r.size += r.items[i].size;
            }
            /* values_equal walks them: keep that short and its recursion shallow */
            if (r.depth > MAX_TUPLE_DEPTH || r.size > MAX_TUPLE_SIZE)
                error_at(e, x->loc, "tuple too big: more than %d levels of nesting or %d values",
                         MAX_TUPLE_DEPTH, MAX_TUPLE_SIZE);
        }
        break;
    case AST_UNARY: r = eval_unary(e, x); break;
    case AST_BINARY: r = eval_binary(e, x); break;
    case AST_COND: {
        Value c = eval(e, x->a);
        r = truth(e, x->a, &c, "the condition of '?:'") ? eval(e, x->b) : eval(e, x->c);
        break;
    }
    case AST_CALL: r = call(e, x); break;
    default: DIE("eval: unexpected AST node %d", x->kind);
    }
    e->eval_depth--;
    return r;
}

/* ---- statements ---------------------------------------------------------------------- */

typedef enum { FLOW_NEXT, FLOW_RETURN } Flow;

static Flow exec_block(Elab *e, const AstNode *blk, Value *ret);

static Flow exec(Elab *e, const AstNode *s, Value *ret)
{
    tick(e, s->loc);
    switch (s->kind) {
    case AST_ASSIGN: assign(e, s->str, eval(e, s->a)); return FLOW_NEXT;
    case AST_RETURN: *ret = eval(e, s->a); return FLOW_RETURN;
    case AST_BLOCK: return exec_block(e, s, ret);
    case AST_IF: {
        Value c = eval(e, s->a);
        if (truth(e, s->a, &c, "an if condition"))
            return exec_block(e, s->b, ret);
        return s->c ? exec(e, s->c, ret) : FLOW_NEXT;
    }
    case AST_FOR: {
        Value from = eval(e, s->a), to = eval(e, s->b);
        if (from.k != V_INT || to.k != V_INT)
            error_at(e, s->loc, "the bounds of a for loop must be ints, got %s..%s",
                     vkind_name(from.k), vkind_name(to.k));
        int64_t limit = e->opt->max_loop_iters ? e->opt->max_loop_iters : 1000000;
        /* to - from in unsigned arithmetic: it may not fit in an int64_t */
        uint64_t iters = to.i > from.i ? (uint64_t)to.i - (uint64_t)from.i : 0;
        if (iters > (uint64_t)limit)
            error_at(e, s->loc, "loop runs %llu times (the limit is %lld)",
                     (unsigned long long)iters, (long long)limit);
        for (int64_t i = from.i; i < to.i; i++) {
            tick(e, s->loc); /* an empty body still costs a step */
            assign(e, s->str, v_int(i));
            if (exec_block(e, s->c, ret) == FLOW_RETURN)
                return FLOW_RETURN;
        }
        return FLOW_NEXT;
    }
    default: DIE("exec: unexpected AST node %d", s->kind);
    }
}

static Flow exec_block(Elab *e, const AstNode *blk, Value *ret)
{
    for (int i = 0; i < blk->list.n; i++)
        if (exec(e, blk->list.items[i], ret) == FLOW_RETURN)
            return FLOW_RETURN;
    return FLOW_NEXT;
}

/* ---- calls: user functions ----------------------------------------------------------------- */

static void open_frame(Elab *e, Frame *f, const char *path, int diag_frame, const AstNode *fn)
{
    memset(f, 0, sizeof *f);
    f->path = path;
    f->diag_frame = diag_frame;
    f->fn = fn;
    f->counters.probes = f->var_index.probes = &e->probes;
}

static void drop_frame(Frame *f)
{
    strmap_free(&f->counters);
    strmap_free(&f->var_index);
    vec_free(&f->var_ptrs);
    vec_free(&f->ops);
}

typedef struct {
    const char *name; /* NULL: positional */
    Value v;
    Loc loc;          /* the value */
    Loc name_loc;     /* the name of a named argument (else the value) */
} Arg;

/* args: the positional ones first (call() checks it). */
static Value call_user(Elab *e, const AstNode *x, const AstNode *def, const Arg *args, int nargs)
{
    int np = def->params.n, npos = 0;
    while (npos < nargs && !args[npos].name)
        npos++;
    if (npos > np)
        error_at(e, x->loc, "too many arguments in call to '%s' (it takes %d, got %d)", def->str,
                 np, npos);
    if (e->call_depth >= (e->opt->max_call_depth ? e->opt->max_call_depth : 100))
        error_at(e, x->loc, "recursion too deep: more than %d nested calls (calling '%s')",
                 e->opt->max_call_depth ? e->opt->max_call_depth : 100, def->str);
    Frame *caller = e->frame;
    caller->ncalls++;
    const char *path = *caller->path ? arena_printf(&e->tmp, "%s_%s%d", caller->path, def->str,
                                                    next_count(caller, def->str))
                                     : arena_printf(&e->tmp, "%s%d", def->str,
                                                    next_count(caller, def->str));
    int df = diag_push_frame(e->d, def->str, x->loc, caller->diag_frame);
    /* frames live in the arena so an error can still walk and free them */
    Frame *fp = arena_alloc(&e->tmp, sizeof *fp);
    open_frame(e, fp, path, df, def);
    fp->parent = caller;
    /* the argument each parameter takes, -1 for its default (an index, not
     * a copy of the value: a recursion makes many calls) */
    int *from = arena_alloc(&e->tmp, sizeof(int) * (size_t)(np ? np : 1));
    for (int i = 0; i < np; i++)
        from[i] = i < npos ? i : -1;
    for (int j = npos; j < nargs; j++) {
        int i = 0;
        while (i < np && strcmp(def->params.items[i]->str, args[j].name) != 0)
            i++;
        if (i == np) {
            Suggest s = {0};
            for (int k = 0; k < np; k++)
                suggest_try(&s, args[j].name, def->params.items[k]->str);
            error_at(e, args[j].name_loc, "'%s' has no parameter '%s'%s", def->str, args[j].name,
                     suggest_text(e, &s));
        }
        if (from[i] >= 0)
            error_at(e, args[j].name_loc, "argument '%s' given twice in call to '%s'", args[j].name,
                     def->str);
        from[i] = j;
    }
    /* bind in the callee frame, in order: defaults may use earlier params */
    e->frame = fp;
    e->call_depth++;
    for (int i = 0; i < np; i++) {
        const AstNode *p = def->params.items[i];
        if (from[i] < 0 && !p->a) {
            e->frame = caller;
            drop_frame(fp);
            error_at(e, x->loc, "missing argument '%s' in call to '%s'", p->str, def->str);
        }
        assign(e, p->str, from[i] >= 0 ? args[from[i]].v : eval(e, p->a));
    }
    Value ret = {0};
    if (def->a)
        ret = eval(e, def->a);
    else if (exec_block(e, def->b, &ret) != FLOW_RETURN)
        error_at(e, def->loc, "function '%s' ends without a return", def->str);
    close_frame_names(e, fp);
    e->call_depth--;
    e->frame = caller;
    drop_frame(fp);
    return ret;
}

/* ---- calls: ops --------------------------------------------------------------------------- */

static void set_attr(Elab *e, Loc loc, Node *n, int a, const Value *v)
{
    const AttrSpec *as = &op_info(n->op)->attrs[a];
    const char *op = op_info(n->op)->name;
    AttrVal *av = &n->attrs[a];
    switch (as->type) {
    case AT_INT:
        if (v->k != V_INT)
            error_at(e, loc, "%s: attribute '%s' must be an int, got %s", op, as->name,
                     vkind_name(v->k));
        if ((double)v->i < as->min || (double)v->i > as->max)
            error_at(e, loc, "%s: attribute '%s' must be between %.0f and %.0f, got %lld", op,
                     as->name, as->min, as->max, (long long)v->i);
        av->i = v->i;
        break;
    case AT_FLOAT:
        if (!is_num(v))
            error_at(e, loc, "%s: attribute '%s' must be a number, got %s", op, as->name,
                     vkind_name(v->k));
        if (!(num(v) >= as->min && num(v) <= as->max))
            error_at(e, loc, "%s: attribute '%s' must be between %g and %g, got %g", op, as->name,
                     as->min, as->max, num(v));
        av->f = num(v);
        break;
    case AT_BOOL:
        if (v->k != V_BOOL)
            error_at(e, loc, "%s: attribute '%s' must be true or false, got %s", op, as->name,
                     vkind_name(v->k));
        av->b = v->b;
        break;
    case AT_ENUM: {
        if (v->k != V_STR)
            error_at(e, loc, "%s: attribute '%s' must be a string, got %s", op, as->name,
                     vkind_name(v->k));
        int i = 0;
        while (as->choices[i] && strcmp(as->choices[i], v->s) != 0)
            i++;
        if (!as->choices[i]) {
            char list[256] = "";
            for (int j = 0; as->choices[j]; j++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"",
                         j ? ", " : "", as->choices[j]);
            error_at(e, loc, "%s: %s=\"%s\" is not one of %s", op, as->name, v->s, list);
        }
        av->e = i;
        break;
    }
    case AT_DTYPE:
        if ((v->k != V_SYM && v->k != V_STR) || dtype_parse(v->s) == DT_UNKNOWN)
            error_at(e, loc, "%s: attribute '%s' must be a dtype: one of %s", op, as->name,
                     dtype_names(false));
        av->e = dtype_parse(v->s);
        break;
    case AT_STR:
        if (v->k != V_STR && v->k != V_SYM)
            error_at(e, loc, "%s: attribute '%s' must be a string", op, as->name);
        av->s = arena_strdup(&e->g->arena, v->s);
        break;
    case AT_TUPLE:
        if (v->k != V_TUPLE)
            error_at(e, loc, "%s: attribute '%s' must be a tuple such as (3,3), got %s", op,
                     as->name, vkind_name(v->k));
        if (v->n > AMPC_MAX_RANK)
            error_at(e, loc, "%s: attribute '%s' has more than %d values", op, as->name,
                     AMPC_MAX_RANK);
        av->t.n = v->n;
        for (int i = 0; i < v->n; i++) {
            if (v->items[i].k != V_INT)
                error_at(e, loc, "%s: attribute '%s' must hold ints, got a %s", op, as->name,
                         vkind_name(v->items[i].k));
            if ((double)v->items[i].i < as->min || (double)v->items[i].i > as->max)
                error_at(e, loc, "%s: attribute '%s' values must be between %.0f and %.0f, got %lld",
                         op, as->name, as->min, as->max, (long long)v->items[i].i);
            av->t.v[i] = v->items[i].i;
        }
        break;
    }
}

static Node *new_param(Elab *e, Loc loc, int kind)
{
    Node *p = add_node(e, OP_Param, NULL, 0, loc);
    p->attrs[PARAM_KIND].e = kind;
    return p;
}

static int param_kind_of_suffix(const char *suffix)
{
    static const char *const kinds[] = {"weight", "bias", "gamma", "beta", "moving_mean",
                                        "moving_var", NULL};
    for (int i = 0; kinds[i]; i++)
        if (suffix && strcmp(suffix, kinds[i]) == 0)
            return i;
    return PK_OTHER;
}

static Value call_op(Elab *e, const AstNode *x, OpKind op, const Arg *args, int nargs)
{
    const OpInfo *oi = op_info(op);
    bool variadic = oi->nslots == 0;
    int nslot = variadic ? 0 : oi->nslots;
    int slot_val[8];
    Loc slot_loc[8];
    for (int s = 0; s < 8; s++)
        slot_val[s] = -1;
    int *var_in = arena_alloc(&e->tmp, sizeof(int) * (size_t)(nargs ? nargs : 1));
    int nvar = 0;
    bool attr_set[16] = {0};
    AttrVal attrs[16];
    const char *explicit_name = NULL;
    for (int a = 0; a < oi->nattrs; a++)
        op_attr_default(op, a, &attrs[a]);
    /* a scratch node carries attributes through set_attr's checks */
    Node scratch = {.op = op, .attrs = attrs};
    int posi = 0;
    for (int i = 0; i < nargs; i++) {
        const Arg *g = &args[i];
        if (!g->name) {
            if (variadic && g->v.k == V_TENSOR) {
                var_in[nvar++] = (int)g->v.i;
                continue;
            }
            if (posi < nslot) {
                if (g->v.k != V_TENSOR) {
                    error_at(e, g->loc, "%s: input '%s' must be a tensor, got %s", oi->name,
                             oi->slots[posi].name, vkind_name(g->v.k));
                }
                slot_val[posi] = (int)g->v.i, slot_loc[posi] = g->loc;
                posi++;
                continue;
            }
            int a = posi - nslot;
            if (a >= oi->nattrs) {
                error_at(e, g->loc, "%s takes at most %d positional argument%s", oi->name,
                         nslot + oi->nattrs, nslot + oi->nattrs == 1 ? "" : "s");
            }
            set_attr(e, g->loc, &scratch, a, &g->v);
            attr_set[a] = true;
            posi++;
            continue;
        }
        if (strcmp(g->name, "name") == 0) {
            if (g->v.k != V_STR || !*g->v.s)
                error_at(e, g->loc, "name must be a non-empty string");
            explicit_name = g->v.s;
            continue;
        }
        int s = op_slot_index(op, g->name);
        if (s >= 0) {
            if (g->v.k != V_TENSOR)
                error_at(e, g->loc, "%s: input '%s' must be a tensor, got %s", oi->name, g->name,
                         vkind_name(g->v.k));
            if (slot_val[s] >= 0)
                error_at(e, g->name_loc, "%s: input '%s' given twice", oi->name, g->name);
            slot_val[s] = (int)g->v.i, slot_loc[s] = g->loc;
            continue;
        }
        int a = op_attr_index(op, g->name);
        if (a < 0) {
            Suggest sg = {0};
            for (int k = 0; k < oi->nattrs; k++)
                suggest_try(&sg, g->name, oi->attrs[k].name);
            for (int k = 0; k < nslot; k++)
                suggest_try(&sg, g->name, oi->slots[k].name);
            error_at(e, g->name_loc,
                     "%s has no attribute or input '%s'%s; it takes %s "
                     "(docs/ops.md)",
                     oi->name, g->name, suggest_text(e, &sg), op_names_text(&e->tmp, op, true));
        }
        if (attr_set[a])
            error_at(e, g->name_loc, "%s: attribute '%s' given twice", oi->name, g->name);
        set_attr(e, g->loc, &scratch, a, &g->v);
        attr_set[a] = true;
    }
    for (int a = 0; a < oi->nattrs; a++)
        if (oi->attrs[a].required && !attr_set[a]) {
            error_at(e, x->loc, "%s: missing required attribute '%s'", oi->name, oi->attrs[a].name);
        }
    /* inputs: given tensors, or implicit parameters */
    int in[8], nin = 0;
    for (int s = 0; s < nslot; s++) {
        const SlotSpec *ss = &oi->slots[s];
        if (!op_slot_present(op, s, attrs)) {
            if (slot_val[s] >= 0)
                error_at(e, slot_loc[s], "%s: input '%s' given, but %s", oi->name, ss->name,
                         op == OP_LeakyReLU ? "only act_type=\"prelu\" takes it"
                                            : "no_bias=true");
            continue;
        }
        if (slot_val[s] < 0) {
            if (ss->kind == SLOT_DATA || ss->kind == SLOT_LABEL)
                error_at(e, x->loc, "%s: missing input '%s'", oi->name, ss->name);
            slot_val[s] = new_param(e, x->loc, param_kind_of_suffix(ss->suffix))->id;
        }
        Node *given = e->g->nodes[slot_val[s]];
        if (given->op == OP_Param && node_enum(given, PARAM_KIND) == PK_OTHER)
            given->attrs[PARAM_KIND].e = param_kind_of_suffix(ss->suffix);
        if (given->op == OP_Input && ss->kind == SLOT_LABEL)
            given->attrs[INPUT_ROLE].e = INPUT_LABEL;
        in[nin++] = slot_val[s];
    }
    Node *n;
    if (variadic) {
        if (nvar == 0)
            error_at(e, x->loc, "%s needs at least one input", oi->name);
        n = add_node(e, op, var_in, nvar, x->loc);
    } else {
        n = add_node(e, op, in, nin, x->loc);
    }
    memcpy(n->attrs, attrs, sizeof(AttrVal) * (size_t)oi->nattrs);
    for (int a = 0; a < oi->nattrs; a++)
        if (attrs[a].type == AT_STR)
            n->attrs[a].s = arena_strdup(&e->g->arena, attrs[a].s);
    if (!oi->check(e->g, n))
        fail(e);
    if (explicit_name) {
        n->flags |= NF_EXPLICIT_NAME;
        name_node(e, n, explicit_name);
    }
    record_op(e, n);
    return v_tensor(n->id);
}

/* ---- calls: builtins ------------------------------------------------------------------------ */

/* param(shape=, init=, wd_mult=, lr_mult=, name=): a parameter node, named
 * after its first consumer unless given a name. */
static Value call_param(Elab *e, const AstNode *x, const Arg *args, int nargs)
{
    Node *p = new_param(e, x->loc, PK_OTHER);
    for (int i = 0; i < nargs; i++) {
        const Arg *g = &args[i];
        if (!g->name)
            error_at(e, g->loc, "param() takes only named arguments (shape, init, wd_mult, "
                                "lr_mult, name)");
        if (strcmp(g->name, "name") == 0) {
            if (g->v.k != V_STR || !*g->v.s)
                error_at(e, g->loc, "name must be a non-empty string");
            p->flags |= NF_EXPLICIT_NAME;
            name_node(e, p, g->v.s);
        } else if (strcmp(g->name, "shape") == 0) {
            if (g->v.k != V_TUPLE || g->v.n > AMPC_MAX_RANK)
                error_at(e, g->loc, "param: shape must be a tuple of at most %d ints", AMPC_MAX_RANK);
            p->shape.rank = g->v.n;
            for (int k = 0; k < g->v.n; k++) {
                if (g->v.items[k].k != V_INT || g->v.items[k].i < 1 || g->v.items[k].i > INT32_MAX)
                    error_at(e, g->loc, "param: shape values must be ints from 1 to %d", INT32_MAX);
                p->shape.d[k] = g->v.items[k].i;
            }
        } else if (strcmp(g->name, "init") == 0) {
            if (g->v.k != V_SYM && g->v.k != V_STR)
                error_at(e, g->loc, "param: init must be an initialiser such as zero, one or "
                                    "msra_prelu()");
            /* the program's own parser, so what it would refuse when it starts
             * (normal(sigma=-1)) is refused here, at the argument */
            RtInit ini;
            char why[256];
            if (strcmp(g->v.s, "default") != 0 && !rt_init_parse(g->v.s, &ini, why, sizeof why))
                error_at(e, g->loc, "param: %s", why);
            p->attrs[PARAM_INIT].s = arena_strdup(&e->g->arena, g->v.s);
        } else {
            int a = op_attr_index(OP_Param, g->name);
            if (a != PARAM_WD_MULT && a != PARAM_LR_MULT)
                error_at(e, g->name_loc, "param() has no argument '%s' (it takes shape, init, "
                                    "wd_mult, lr_mult, name)", g->name);
            set_attr(e, g->loc, p, a, &g->v);
            if (a == PARAM_WD_MULT)
                p->flags |= NF_EXPLICIT_WD;
        }
    }
    return v_tensor(p->id);
}

/* msra_prelu(slope=0.25), xavier(...), ...: an initialiser, kept as text. */
static Value call_init(Elab *e, const AstNode *x, const Arg *args, int nargs)
{
    char buf[512];
    size_t k = (size_t)snprintf(buf, sizeof buf, "%s(", x->str);
    for (int i = 0; i < nargs && k < sizeof buf; i++) {
        const Value *v = &args[i].v;
        if (!args[i].name)
            error_at(e, args[i].loc, "%s: use named arguments", x->str);
        const char *sep = i ? ", " : "";
        if (v->k == V_INT)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s=%lld", sep, args[i].name, (long long)v->i);
        else if (v->k == V_FLOAT) {
            /* the shortest text that reads back to the same double: 0.07,
             * not 0.070000000000000007 */
            char num[40];
            for (int prec = 6; prec <= 17; prec++) {
                snprintf(num, sizeof num, "%.*g", prec, v->f);
                if (strtod(num, NULL) == v->f)
                    break;
            }
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s=%s", sep, args[i].name, num);
        }
        else if (v->k == V_STR)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s=\"%s\"", sep, args[i].name, v->s);
        else
            error_at(e, args[i].loc, "%s: argument '%s' must be a number or a string", x->str,
                     args[i].name);
    }
    if (k >= sizeof buf - 1)
        error_at(e, x->loc, "%s: too many arguments", x->str);
    snprintf(buf + k, sizeof buf - k, ")");
    return (Value){.k = V_SYM, .s = arena_strdup(&e->tmp, buf)};
}

/* Ops the DSL may call: not graph leaves, nor the nodes only passes make
 * (AMP's casts, and autodiff's ops, which ops.def lists from part on). */
/* What a call of a user function allocated, to give back when nothing
 * refers to it any more. */
typedef struct {
    ArenaMark tmp, frame_names;
    int frames, nodes;
} CallMark;

static CallMark call_mark(const Elab *e)
{
    return (CallMark){arena_mark(&e->tmp), arena_mark(&e->d->arena), e->d->frames.len,
                      e->g->nnodes};
}

/* A call that made no node and returns a scalar or an existing tensor left
 * nothing that anyone refers to: its arguments, frame, variables, path and
 * call frames (no node records them) are freed.  So memory follows the
 * live calls, not every call made, and a recursion that computes numbers
 * (2^n calls) is stopped by the work limit, cheaply, not after gigabytes.
 * Strings and tuples may live in the freed memory: those calls keep it. */
static void call_release(Elab *e, const CallMark *m, const Value *ret)
{
    bool scalar = ret->k == V_NONE || ret->k == V_INT || ret->k == V_FLOAT || ret->k == V_BOOL ||
                  ret->k == V_TENSOR;
    if (!scalar || e->g->nnodes != m->nodes)
        return;
    arena_release(&e->tmp, m->tmp);
    arena_release(&e->d->arena, m->frame_names);
    e->d->frames.len = m->frames;
}

/* Not inlined into eval: its locals would enlarge eval's frame, which every
 * level of a nested expression pays for (about 2 KiB instead of 0.5). */
__attribute__((noinline)) static Value call(Elab *e, const AstNode *x)
{
    tick(e, x->loc);
    CallMark mark = call_mark(e);
    int n = x->list.n;
    Arg *args = arena_alloc(&e->tmp, sizeof(Arg) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        const AstNode *a = x->list.items[i];
        args[i].name = a->str;
        args[i].loc = a->a->loc;
        args[i].name_loc = a->str ? a->loc : a->a->loc;
        args[i].v = eval(e, a->a);
        for (int j = 0; j < i && a->str; j++)
            if (args[j].name && strcmp(args[j].name, a->str) == 0)
                error_at(e, args[i].name_loc, "argument '%s' given twice", a->str);
        if (!a->str && i > 0 && args[i - 1].name)
            error_at(e, args[i].loc, "positional argument after a named one");
    }
    int *def = strmap_get(&e->defs, x->str);
    if (def) {
        Value r = call_user(e, x, e->prog->decls.items[*def], args, n);
        call_release(e, &mark, &r);
        return r;
    }
    OpKind op = op_lookup(x->str);
    if (op != OP_COUNT && op_user_callable(op))
        return call_op(e, x, op, args, n);
    if (strcmp(x->str, "param") == 0)
        return call_param(e, x, args, n);
    if (in_list(init_funcs, x->str))
        return call_init(e, x, args, n);
    Suggest s = {0};
    for (int k = 0; k < OP_COUNT; k++)
        if (op_user_callable((OpKind)k))
            suggest_try(&s, x->str, op_table[k].name);
    for (int k = 0; k < e->prog->decls.n; k++)
        if (e->prog->decls.items[k]->kind == AST_DEF)
            suggest_try(&s, x->str, e->prog->decls.items[k]->str);
    char hint[128];
    if (op_call_hint(x->str, hint, sizeof hint))
        error_at(e, x->loc, "unknown op or function '%s': write %s (docs/ops.md, ampc --list-ops)",
                 x->str, hint);
    error_at(e, x->loc, "unknown op or function '%s'%s", x->str, suggest_text(e, &s));
}

/* ---- the model ----------------------------------------------------------------------------- */

static void add_input(Elab *e, const AstNode *p)
{
    DType dt = dtype_parse(p->dtype);
    if (dt == DT_UNKNOWN)
        error_at(e, p->loc, "unknown dtype '%s' for input '%s' (the dtypes: %s)", p->dtype, p->str,
                 dtype_names(false));
    if (p->list.n > AMPC_MAX_RANK)
        error_at(e, p->loc, "input '%s' has more than %d dimensions", p->str, AMPC_MAX_RANK);
    Node *n = add_node(e, OP_Input, NULL, 0, p->loc);
    n->dtype = dt;
    n->shape.rank = p->list.n;
    for (int i = 0; i < p->list.n; i++) {
        const AstNode *dim = p->list.items[i];
        if (dim->kind == AST_IDENT) {
            if (i != 0)
                error_at(e, dim->loc, "only the first dimension may be symbolic (the batch size)");
            n->shape.d[i] = DIM_N;
        } else if (dim->ival < 1 || dim->ival > INT32_MAX) {
            error_at(e, dim->loc, "dimension %lld of input '%s' must be between 1 and %d",
                     (long long)dim->ival, p->str, INT32_MAX);
        } else {
            n->shape.d[i] = dim->ival;
        }
    }
    name_node(e, n, p->str);
    assign(e, p->str, v_tensor(n->id));
}

static void add_outputs(Elab *e, const AstNode *m, const Value *ret)
{
    if (ret->k == V_TENSOR) {
        graph_add_output(e->g, (int)ret->i);
        return;
    }
    if (ret->k == V_TUPLE && ret->n > 0) {
        for (int i = 0; i < ret->n; i++) {
            if (ret->items[i].k != V_TENSOR)
                error_at(e, m->loc, "model '%s' must return tensors, got a %s in its tuple",
                         m->str, vkind_name(ret->items[i].k));
            graph_add_output(e->g, (int)ret->items[i].i);
        }
        return;
    }
    error_at(e, m->loc, "model '%s' must return a tensor or a tuple of tensors, got %s", m->str,
             vkind_name(ret->k));
}

static ConfigVal *config_from_value(Elab *e, const AstNode *x, const Value *v);

/* A train-block value: literals, bare words (symbols) and calls such as
 * nag(momentum=0.9) are kept as written; other expressions are evaluated. */
static ConfigVal *config_from_ast(Elab *e, const AstNode *x)
{
    ConfigVal *c = arena_alloc(&e->tmp, sizeof *c);
    if (x->kind == AST_IDENT && !lookup(e, x->str)) {
        c->kind = CV_SYM;
        c->s = x->str;
        return c;
    }
    if (x->kind == AST_CALL && !strmap_get(&e->defs, x->str)) {
        c->kind = CV_CALL;
        c->s = x->str;
        c->nargs = x->list.n;
        c->args = arena_alloc(&e->tmp, sizeof(ConfigVal *) * (size_t)(c->nargs ? c->nargs : 1));
        c->argnames = arena_alloc(&e->tmp, sizeof(char *) * (size_t)(c->nargs ? c->nargs : 1));
        for (int i = 0; i < c->nargs; i++) {
            c->argnames[i] = x->list.items[i]->str;
            c->args[i] = config_from_ast(e, x->list.items[i]->a);
        }
        return c;
    }
    Value v = eval(e, x);
    return config_from_value(e, x, &v);
}

static ConfigVal *config_from_value(Elab *e, const AstNode *x, const Value *v)
{
    ConfigVal *c = arena_alloc(&e->tmp, sizeof *c);
    switch (v->k) {
    case V_INT: c->kind = CV_INT, c->i = v->i; break;
    case V_FLOAT: c->kind = CV_FLOAT, c->f = v->f; break;
    case V_BOOL: c->kind = CV_BOOL, c->b = v->b; break;
    case V_STR: c->kind = CV_STR, c->s = v->s; break;
    case V_SYM: c->kind = CV_SYM, c->s = v->s; break;
    default: error_at(e, x->loc, "a train setting cannot be a %s", vkind_name(v->k));
    }
    return c;
}

/* The keys are runtime/settings.c's table, shared with the training program;
 * the values are checked against its parsers after elaboration
 * (compiler/frontend.c, train_settings_ok). */

static void read_train(Elab *e, const AstNode *t)
{
    ConfigEntry *entries = arena_alloc(&e->tmp, sizeof(ConfigEntry) * (size_t)(t->list.n + 1));
    int nent = 0;
    for (int i = 0; i < t->list.n; i++) {
        const AstNode *kv = t->list.items[i];
        if (!rt_setting_by_key(kv->str)) {
            Suggest s = {0};
            for (int k = 0; k < rt_nsettings; k++)
                if (rt_settings[k].key)
                    suggest_try(&s, kv->str, rt_settings[k].key);
            error_at(e, kv->loc, "unknown train setting '%s'%s", kv->str, suggest_text(e, &s));
        }
        for (int j = 0; j < nent; j++)
            if (strcmp(entries[j].key, kv->str) == 0)
                error_at(e, kv->loc, "train setting '%s' given twice", kv->str);
        ConfigEntry *ce = &entries[nent++];
        ce->key = kv->str;
        ce->loc = kv->loc;
        ce->val = config_from_ast(e, kv->a);
    }
    graph_set_train(e->g, entries, nent);
}

static const AstNode *pick_model(Elab *e)
{
    const AstNode *first = NULL;
    for (int i = 0; i < e->prog->decls.n; i++) {
        const AstNode *d = e->prog->decls.items[i];
        if (d->kind != AST_MODEL)
            continue;
        if (e->opt->model && strcmp(d->str, e->opt->model) == 0)
            return d;
        if (!e->opt->model && d->loc.file == e->prog->main_file && !first)
            first = d;
    }
    if (e->opt->model) {
        diag_plain_error(e->d, "no model named '%s'", e->opt->model);
        fail(e);
    }
    if (!first) {
        const SrcFile *f = diag_file(e->d, e->prog->main_file);
        diag_error(e->d, (Loc){e->prog->main_file, 1, 1}, "no model defined in '%s'",
                   f ? f->path : "?");
        fail(e);
    }
    return first;
}

static void index_defs(Elab *e)
{
    for (int i = 0; i < e->prog->decls.n; i++) {
        const AstNode *d = e->prog->decls.items[i];
        if (d->kind != AST_DEF)
            continue;
        if (op_lookup(d->str) != OP_COUNT || strcmp(d->str, "param") == 0 ||
            in_list(init_funcs, d->str))
            error_at(e, d->loc, "'%s' is a built-in op and cannot be redefined", d->str);
        if (!strmap_put(&e->defs, d->str, i)) {
            const AstNode *o = e->prog->decls.items[*strmap_get(&e->defs, d->str)];
            const SrcFile *f = diag_file(e->d, o->loc.file);
            error_at(e, d->loc, "function '%s' is already defined at %s:%d:%d", d->str,
                     f ? f->path : "?", o->loc.line, o->loc.col);
        }
        StrMap seen = {0}; /* a map, not pairs: a generated def may have many parameters */
        for (int j = 0; j < d->params.n; j++)
            if (!strmap_put(&seen, d->params.items[j]->str, j)) {
                strmap_free(&seen);
                error_at(e, d->params.items[j]->loc, "parameter '%s' appears twice",
                         d->params.items[j]->str);
            }
        strmap_free(&seen);
    }
}

/* Two models of one name, or two train blocks for one model, would leave one
 * of them silently unused (the first model and the last train block won):
 * an error at the second, with a note at the first. */
static void check_unique_decls(Elab *e)
{
    StrMap seen[2] = {{0}, {0}}; /* models, train blocks: name -> decl index */
    const AstNode *dup = NULL, *first = NULL;
    for (int i = 0; i < e->prog->decls.n && !dup; i++) {
        const AstNode *d = e->prog->decls.items[i];
        if (d->kind != AST_MODEL && d->kind != AST_TRAIN)
            continue;
        StrMap *m = &seen[d->kind == AST_TRAIN];
        if (!strmap_put(m, d->str, i))
            dup = d, first = e->prog->decls.items[*strmap_get(m, d->str)];
    }
    strmap_free(&seen[0]);
    strmap_free(&seen[1]);
    if (!dup)
        return;
    if (dup->kind == AST_MODEL) {
        diag_error(e->d, dup->loc, "model '%s' is defined twice", dup->str);
        diag_note(e->d, first->loc, "the first definition of '%s' is here", dup->str);
    } else {
        diag_error(e->d, dup->loc, "a second train block for model '%s' (give each setting once, "
                                   "in one block)", dup->str);
        diag_note(e->d, first->loc, "the first train block for '%s' is here", dup->str);
    }
    fail(e);
}

static void elaborate_model(Elab *e, const AstNode *m)
{
    Frame *top = arena_alloc(&e->tmp, sizeof *top);
    open_frame(e, top, "", -1, NULL);
    e->frame = top;
    for (int i = 0; i < m->params.n; i++) {
        const AstNode *p = m->params.items[i];
        if (lookup(e, p->str))
            error_at(e, p->loc, "model parameter '%s' appears twice", p->str);
        if (p->dtype)
            add_input(e, p);
        else
            assign(e, p->str, p->a ? eval(e, p->a) : (Value){0});
    }
    Value ret = {0};
    if (exec_block(e, m->b, &ret) != FLOW_RETURN)
        error_at(e, m->loc, "model '%s' ends without a return", m->str);
    add_outputs(e, m, &ret);
    close_frame_names(e, top);
    /* a parameter no op reads (returned as it is) is named like an op of the model */
    for (int i = 0; i < e->g->noutputs; i++) {
        Node *n = e->g->nodes[e->g->outputs[i]];
        if (!n->name) {
            const char *prefix = op_info(n->op)->prefix, *name;
            do
                name = arena_printf(&e->tmp, "%s%d", prefix, next_count(top, prefix));
            while (graph_find(e->g, name));
            name_node(e, n, name);
        }
    }
    for (int i = 0; i < e->prog->decls.n; i++) {
        const AstNode *t = e->prog->decls.items[i];
        if (t->kind != AST_TRAIN)
            continue;
        bool known = false;
        Suggest s = {0};
        for (int k = 0; k < e->prog->decls.n; k++) {
            const AstNode *d = e->prog->decls.items[k];
            if (d->kind != AST_MODEL)
                continue;
            known |= strcmp(d->str, t->str) == 0;
            suggest_try(&s, t->str, d->str);
        }
        if (!known)
            error_at(e, t->loc, "train block for unknown model '%s'%s", t->str,
                     suggest_text(e, &s));
        if (strcmp(t->str, m->str) == 0)
            read_train(e, t);
    }
    e->frame = NULL;
    drop_frame(top);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* MXNet's rule (Optimizer.set_wd_mult): without an explicit wd_mult, only
 * weights and gammas get weight decay.  MXNet reads it from the name suffix
 * (_weight, _gamma); ampc from the slot a parameter fills, which agrees for
 * implicit names and also covers param(name="w") passed as a weight, and
 * from the name only for parameters in no such slot.  Applied once names
 * are known, so the table says what the optimizer does. */
static void default_wd_mults(Graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (n->op != OP_Param || (n->flags & NF_EXPLICIT_WD))
            continue;
        int k = node_param_kind(n);
        bool decay = k == PK_WEIGHT || k == PK_GAMMA ||
                     (k == PK_OTHER && n->name &&
                      (ends_with(n->name, "_weight") || ends_with(n->name, "_gamma")));
        n->attrs[PARAM_WD_MULT].f = decay ? 1.0 : 0.0;
    }
}

Graph *elaborate(const AstProgram *prog, Diag *d, const ElabOptions *opt)
{
    static const ElabOptions defaults = {0};
    Elab e = {.d = d, .prog = prog, .opt = opt ? opt : &defaults,
              .stack_base = (uintptr_t)__builtin_frame_address(0)};
    arena_init(&e.tmp);
    /* Frames live on the C stack of call_user and are chained by parent,
     * so an error can free the maps of every open frame. */
    if (setjmp(e.fail)) {
        /* unwind: free the maps of frames still open */
        for (Frame *f = e.frame; f; f = f->parent)
            drop_frame(f);
        graph_free(e.g);
        strmap_free(&e.defs);
        arena_free(&e.tmp);
        return NULL;
    }
    e.defs.probes = &e.probes;
    index_defs(&e);
    check_unique_decls(&e);
    const AstNode *m = pick_model(&e);
    e.g = graph_new(d, m->str);
    e.g->names.probes = &e.probes;
    elaborate_model(&e, m);
    default_wd_mults(e.g);
    e.g->names.probes = NULL; /* the graph outlives e */
    strmap_free(&e.defs);
    arena_free(&e.tmp);
    if (e.opt->probes)
        *e.opt->probes = e.probes;
    return graph_compact(e.g);
}
