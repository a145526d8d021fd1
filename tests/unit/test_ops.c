/* test_ops.c - the op table's schemas and shape rules, through tiny models:
 * one successful shape inference for every op, the error cases of each
 * family with their exact messages, and attribute checking (types, ranges,
 * choices, required attributes, positional attributes, did-you-mean). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

/* elaborate + infer-shapes + infer-types: the front end up to the point
 * where every op has a shape and a dtype. */
static Graph *compile(Fx *fx, const char *src)
{
    graph_free(fx->g);
    fx->off = strlen(diag_text(fx));
    Graph *g = frontend_elaborate(&fx->d, "t.sym", src, strlen(src), NULL);
    if (g && (!infer_shapes(g) || !infer_types(g))) {
        graph_free(g);
        g = NULL;
    }
    fx->g = g;
    return g;
}

/* model m(INPUTS) { return EXPR }: the expression is on line 2, column 12. */
static Graph *compile_expr(Fx *fx, const char *inputs, const char *expr)
{
    snprintf(fx->src, sizeof fx->src, "model m(%s) {\n    return %s\n}\n", inputs, expr);
    return compile(fx, fx->src);
}

static const char *shape_text(Fx *fx, const Node *n)
{
    return shape_str(&n->shape, fx->sbuf, sizeof fx->sbuf);
}

/* The shape of the model's (first) output. */
static const char *out_shape(Fx *fx, const char *inputs, const char *expr)
{
    if (!compile_expr(fx, inputs, expr))
        fail_msg("compiling\n%s\nfailed:\n%s", fx->src, last_diag(fx));
    return shape_text(fx, fx->g->nodes[fx->g->outputs[0]]);
}

static const Node *node(Fx *fx, const char *name)
{
    const Node *n = graph_find(fx->g, name);
    if (!n)
        fail_msg("no node named '%s'", name);
    return n;
}

static const char *node_shape(Fx *fx, const char *name) { return shape_text(fx, node(fx, name)); }

/* Compiling must fail; returns what it reported. */
static const char *error_of(Fx *fx, const char *inputs, const char *expr)
{
    if (compile_expr(fx, inputs, expr))
        fail_msg("compiling\n%s\nshould have failed", fx->src);
    return last_diag(fx);
}

#define IMG "x: float32[N,4,9,9]"

/* ---- one shape inference per op ------------------------------------------------ */

typedef struct {
    const char *op;     /* the op this case covers */
    const char *inputs; /* model inputs */
    const char *expr;   /* the returned expression */
    const char *node;   /* the node to check (NULL: the output) */
    const char *shape;  /* its shape */
} ShapeCase;

static const ShapeCase shape_cases[] = {
    {"Input", "x: float32[N,3,5,5]", "Activation(x, act_type=\"relu\")", "x", "[N,3,5,5]"},
    {"Param", IMG, "Convolution(x, kernel=(3,3), num_filter=8)", "conv1_weight", "[8,4,3,3]"},
    {"Convolution", IMG,
     "Convolution(x, kernel=(3,3), stride=(2,2), pad=(1,1), dilate=(2,2), num_filter=6, "
     "num_group=2)",
     NULL, "[N,6,4,4]"},
    {"FullyConnected", "x: float32[N,3,4,5]", "FullyConnected(x, num_hidden=7)", NULL, "[N,7]"},
    {"BatchNorm", "x: float32[N,3,4,5]", "BatchNorm(x)", NULL, "[N,3,4,5]"},
    {"Activation", IMG, "Activation(x, act_type=\"softrelu\")", NULL, "[N,4,9,9]"},
    {"LeakyReLU", IMG, "LeakyReLU(x, act_type=\"prelu\")", NULL, "[N,4,9,9]"},
    {"Dropout", IMG, "Dropout(x, p=0.3)", NULL, "[N,4,9,9]"},
    {"Pooling", IMG, "Pooling(x, kernel=(3,3), stride=(2,2))", NULL, "[N,4,4,4]"},
    {"Flatten", IMG, "Flatten(x)", NULL, "[N,324]"},
    {"Reshape", "x: float32[N,3,4]", "Reshape(x, shape=(-1,12))", NULL, "[N,12]"},
    {"Concat", "x: float32[N,3,4], y: float32[N,5,4]", "Concat(x, y, dim=1)", NULL, "[N,8,4]"},
    {"elemwise_add", IMG, "x + x", NULL, "[N,4,9,9]"},
    {"elemwise_sub", IMG, "x - x", NULL, "[N,4,9,9]"},
    {"elemwise_mul", IMG, "x * x", NULL, "[N,4,9,9]"},
    {"broadcast_add", "x: float32[N,3,4], y: float32[3,1]", "broadcast_add(x, y)", NULL, "[N,3,4]"},
    {"broadcast_mul", "x: float32[N,1,4], y: float32[5,1]", "broadcast_mul(x, y)", NULL, "[N,5,4]"},
    {"_plus_scalar", IMG, "x + 1", NULL, "[N,4,9,9]"},
    {"_minus_scalar", IMG, "x - 1", NULL, "[N,4,9,9]"},
    {"_rminus_scalar", IMG, "1 - x", NULL, "[N,4,9,9]"},
    {"_mul_scalar", IMG, "x * 2", NULL, "[N,4,9,9]"},
    {"_div_scalar", IMG, "x / 2", NULL, "[N,4,9,9]"},
    {"_rdiv_scalar", IMG, "1 / x", NULL, "[N,4,9,9]"},
    {"exp", IMG, "exp(x)", NULL, "[N,4,9,9]"},
    {"log", IMG, "log(x)", NULL, "[N,4,9,9]"},
    {"sqrt", IMG, "sqrt(x)", NULL, "[N,4,9,9]"},
    /* the unary math of MXNet's AMP lists: the input's shape */
    {"sin", IMG, "sin(x)", NULL, "[N,4,9,9]"},
    {"cos", IMG, "cos(x)", NULL, "[N,4,9,9]"},
    {"tan", IMG, "tan(x)", NULL, "[N,4,9,9]"},
    {"arcsin", IMG, "arcsin(x)", NULL, "[N,4,9,9]"},
    {"arccos", IMG, "arccos(x)", NULL, "[N,4,9,9]"},
    {"arctan", IMG, "arctan(x)", NULL, "[N,4,9,9]"},
    {"sinh", IMG, "sinh(x)", NULL, "[N,4,9,9]"},
    {"cosh", IMG, "cosh(x)", NULL, "[N,4,9,9]"},
    {"arcsinh", IMG, "arcsinh(x)", NULL, "[N,4,9,9]"},
    {"arccosh", IMG, "arccosh(x)", NULL, "[N,4,9,9]"},
    {"arctanh", IMG, "arctanh(x)", NULL, "[N,4,9,9]"},
    {"expm1", IMG, "expm1(x)", NULL, "[N,4,9,9]"},
    {"log1p", IMG, "log1p(x)", NULL, "[N,4,9,9]"},
    {"log2", IMG, "log2(x)", NULL, "[N,4,9,9]"},
    {"log10", IMG, "log10(x)", NULL, "[N,4,9,9]"},
    {"cbrt", IMG, "cbrt(x)", NULL, "[N,4,9,9]"},
    {"rcbrt", IMG, "rcbrt(x)", NULL, "[N,4,9,9]"},
    {"rsqrt", IMG, "rsqrt(x)", NULL, "[N,4,9,9]"},
    {"reciprocal", IMG, "reciprocal(x)", NULL, "[N,4,9,9]"},
    {"square", IMG, "square(x)", NULL, "[N,4,9,9]"},
    {"abs", IMG, "abs(x)", NULL, "[N,4,9,9]"},
    {"negative", IMG, "negative(x)", NULL, "[N,4,9,9]"},
    {"sign", IMG, "sign(x)", NULL, "[N,4,9,9]"},
    {"erf", IMG, "erf(x)", NULL, "[N,4,9,9]"},
    {"degrees", IMG, "degrees(x)", NULL, "[N,4,9,9]"},
    {"radians", IMG, "radians(x)", NULL, "[N,4,9,9]"},
    {"floor", IMG, "floor(x)", NULL, "[N,4,9,9]"},
    {"ceil", IMG, "ceil(x)", NULL, "[N,4,9,9]"},
    {"round", IMG, "round(x)", NULL, "[N,4,9,9]"},
    {"trunc", IMG, "trunc(x)", NULL, "[N,4,9,9]"},
    {"fix", IMG, "fix(x)", NULL, "[N,4,9,9]"},
    {"rint", IMG, "rint(x)", NULL, "[N,4,9,9]"},
    {"clip", IMG, "clip(x, a_min=0, a_max=6)", NULL, "[N,4,9,9]"},
    {"Cast", IMG, "Cast(x, dtype=float16)", NULL, "[N,4,9,9]"},
    {"softmax", "x: float32[N,10]", "softmax(x)", NULL, "[N,10]"},
    {"log_softmax", "x: float32[N,10]", "log_softmax(x, axis=1)", NULL, "[N,10]"},
    {"sum", "x: float32[N,3,4]", "sum(x, axis=(1,))", NULL, "[N,4]"},
    {"mean", "x: float32[N,3,4]", "mean(x, axis=(2,), keepdims=true)", NULL, "[N,3,1]"},
    {"SoftmaxOutput", "x: float32[N,10], label: float32[N]", "SoftmaxOutput(x, label)", NULL,
     "[N,10]"},
};

/* Ops the DSL cannot write (passes insert them: casts, gradients): calling
 * one is an unknown op. */
static bool pass_only(Fx *fx, OpKind k)
{
    char expr[96], want[128];
    snprintf(expr, sizeof expr, "%s(x)", op_info(k)->name);
    snprintf(want, sizeof want, "t.sym:2:12: error: unknown op or function '%s'", op_info(k)->name);
    if (compile_expr(fx, "x: float32[N,4]", expr))
        return false;
    return strstr(last_diag(fx), want) != NULL;
}

static void test_every_op_infers_a_shape(void **state)
{
    Fx *fx = *state;
    bool covered[OP_COUNT] = {0};
    for (size_t i = 0; i < sizeof shape_cases / sizeof shape_cases[0]; i++) {
        const ShapeCase *c = &shape_cases[i];
        OpKind k = op_lookup(c->op);
        assert_int_not_equal(k, OP_COUNT);
        if (!compile_expr(fx, c->inputs, c->expr))
            fail_msg("%s: compiling\n%s\nfailed:\n%s", c->op, fx->src, last_diag(fx));
        const Node *n = c->node ? node(fx, c->node) : fx->g->nodes[fx->g->outputs[0]];
        if (n->op != k)
            fail_msg("%s: the checked node is a %s", c->op, op_info(n->op)->name);
        if (strcmp(shape_text(fx, n), c->shape) != 0)
            fail_msg("%s: %s has shape %s, expected %s", c->op, c->expr, fx->sbuf, c->shape);
        /* every node of every case has a shape and a dtype */
        for (int j = 0; j < fx->g->nnodes; j++) {
            assert_true(fx->g->nodes[j]->shape.rank >= 0);
            assert_int_not_equal(fx->g->nodes[j]->dtype, DT_UNKNOWN);
        }
        covered[k] = true;
    }
    for (int k = 0; k < OP_COUNT; k++)
        if (!covered[k] && !pass_only(fx, (OpKind)k))
            fail_msg("op %s can be written in the DSL but has no shape case in test_ops.c",
                     op_info((OpKind)k)->name);
}

static void test_pass_only_ops(void **state)
{
    Fx *fx = *state;
    /* the casts AMP inserts: the DSL cannot call them, and they keep the shape */
    static const OpKind casts[] = {OP_amp_cast, OP_param_master};
    for (int i = 0; i < 2; i++)
        assert_true(pass_only(fx, casts[i]));
    /* nor autodiff's */
    assert_true(pass_only(fx, op_lookup("grad_of")));
    assert_true(pass_only(fx, op_lookup("part")));
    assert_true(pass_only(fx, op_lookup("_backward_Convolution")));
    graph_free(fx->g);
    Graph *g = fx->g = graph_new(&fx->d, "m");
    Node *x = graph_add(g, OP_Input, NULL, 0, loc_none(), -1);
    x->shape = (Shape){.rank = 3, .d = {DIM_N, 3, 7}};
    for (int i = 0; i < 2; i++) {
        int in = 0;
        Node *n = graph_add(g, casts[i], &in, 1, loc_none(), -1);
        if (op_info(casts[i])->nattrs)
            n->attrs[CAST_DTYPE].e = DT_F16;
        assert_true(op_info(casts[i])->check(g, n));
        assert_true(op_info(casts[i])->shape(g, n));
        assert_string_equal(shape_text(fx, n), "[N,3,7]");
    }
    /* amp_cast only casts between float types */
    int in = 0;
    Node *n = graph_add(g, OP_amp_cast, &in, 1, (Loc){-1, 0, 0}, -1);
    n->attrs[CAST_DTYPE].e = DT_I8;
    size_t off = strlen(diag_text(fx));
    assert_false(op_info(OP_amp_cast)->check(g, n));
    assert_contains(diag_text(fx) + off, "amp_cast: dtype must be a floating-point type");
}

/* ---- Convolution --------------------------------------------------------------- */

static void test_conv_shapes(void **state)
{
    Fx *fx = *state;
    /* (9 + 2*1 - (2*(3-1)+1)) / 2 + 1 = 4; weight [F, C/g, kh, kw] */
    out_shape(fx, IMG, "Convolution(x, kernel=(3,3), stride=(2,2), pad=(1,1), dilate=(2,2), "
                       "num_filter=6, num_group=2)");
    assert_string_equal(node_shape(fx, "conv1_weight"), "[6,2,3,3]");
    assert_string_equal(node_shape(fx, "conv1_bias"), "[6]");
    const Node *c = node(fx, "conv1");
    assert_int_equal(node_tuple(c, CONV_STRIDE)->t.v[1], 2);
    /* defaults: stride 1, pad 0, dilate 1, filled to the kernel's rank */
    assert_string_equal(out_shape(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=8)"), "[N,8,7,7]");
    c = node(fx, "conv1");
    assert_int_equal(node_tuple(c, CONV_STRIDE)->t.n, 2);
    assert_int_equal(node_tuple(c, CONV_PAD)->t.v[0], 0);
    assert_int_equal(node_tuple(c, CONV_DILATE)->t.v[1], 1);
    assert_string_equal(node_shape(fx, "conv1_weight"), "[8,4,3,3]");
    /* the ResNet stem: 224 -> 112 */
    assert_string_equal(out_shape(fx, "x: float32[N,3,224,224]",
                                  "Convolution(x, kernel=(7,7), stride=(2,2), pad=(3,3), "
                                  "num_filter=64)"),
                        "[N,64,112,112]");
    /* rectangular kernel, stride and pad per axis */
    assert_string_equal(out_shape(fx, "x: float32[N,3,10,20]",
                                  "Convolution(x, kernel=(3,5), stride=(1,3), pad=(0,2), "
                                  "num_filter=2)"),
                        "[N,2,8,7]");
    assert_string_equal(node_shape(fx, "conv1_weight"), "[2,3,3,5]");
    /* 1-D and 3-D */
    assert_string_equal(out_shape(fx, "x: float32[N,4,9]",
                                  "Convolution(x, kernel=(3,), num_filter=6, no_bias=true)"),
                        "[N,6,7]");
    assert_string_equal(node_shape(fx, "conv1_weight"), "[6,4,3]");
    assert_null(graph_find(fx->g, "conv1_bias"));
    assert_int_equal(node(fx, "conv1")->nin, 2);
    assert_string_equal(out_shape(fx, "x: float32[N,2,5,6,7]",
                                  "Convolution(x, kernel=(3,3,3), pad=(1,1,1), num_filter=4)"),
                        "[N,4,5,6,7]");
    assert_string_equal(node_shape(fx, "conv1_weight"), "[4,2,3,3,3]");
    /* depthwise: num_group = channels */
    out_shape(fx, "x: float32[N,8,5,5]", "Convolution(x, kernel=(3,3), num_filter=8, num_group=8)");
    assert_string_equal(node_shape(fx, "conv1_weight"), "[8,1,3,3]");
    /* a kernel exactly as large as the padded input gives one pixel */
    assert_string_equal(out_shape(fx, "x: float32[N,1,5,5]",
                                  "Convolution(x, kernel=(3,3), dilate=(3,3), pad=(1,1), "
                                  "num_filter=1)"),
                        "[N,1,1,1]");
    /* an explicit weight of the right shape is accepted as it is */
    assert_string_equal(out_shape(fx, IMG, "Convolution(x, kernel=(1,1), num_filter=2, "
                                           "weight=param(shape=(2,4,1,1)), no_bias=true)"),
                        "[N,2,9,9]");
    /* positional: data, weight, bias, then the attributes in schema order */
    assert_string_equal(out_shape(fx, "x: float32[N,6,4]",
                                  "Convolution(x, param(shape=(2,6,3)), param(shape=(2,)), (3,), "
                                  "(1,), (0,), (1,), 2)"),
                        "[N,2,2]");
}

static void test_conv_errors(void **state)
{
    Fx *fx = *state;
    /* channel mismatch with an explicit weight */
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=6, "
                                      "weight=param(shape=(6,3,3,3)))"),
                    "t.sym:2:12: error: Convolution: weight shape [6,3,3,3] does not match the "
                    "expected [6,4,3,3] (input has 4 channels)\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=6, num_group=2, "
                                      "weight=param(shape=(6,4,3,3)))"),
                    "error: Convolution: weight shape [6,4,3,3] does not match the expected "
                    "[6,2,3,3] (input has 4 channels)\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=6, "
                                      "bias=param(shape=(5,)))"),
                    "error: Convolution: bias shape [5] does not match the expected [6]\n");
    /* a zero kernel is out of the attribute's range */
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(0,3), num_filter=6)"),
                    "t.sym:2:34: error: Convolution: attribute 'kernel' values must be between 1 "
                    "and 1048576, got 0\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), stride=(0,1), num_filter=6)"),
                    "error: Convolution: attribute 'stride' values must be between 1 and 1048576, "
                    "got 0\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), pad=(-1,0), num_filter=6)"),
                    "error: Convolution: attribute 'pad' values must be between 0 and 1048576, "
                    "got -1\n");
    /* an output smaller than one pixel */
    assert_contains(error_of(fx, "x: float32[N,4,2,9]", "Convolution(x, kernel=(3,3), num_filter=6)"),
                    "t.sym:2:12: error: Convolution: the output would be smaller than one pixel "
                    "(input [N,4,2,9], kernel 3 on axis 2)\n");
    assert_contains(error_of(fx, "x: float32[N,1,5,5]",
                             "Convolution(x, kernel=(3,3), dilate=(1,3), num_filter=1)"),
                    "error: Convolution: the output would be smaller than one pixel (input "
                    "[N,1,5,5], kernel 3 on axis 3)\n");
    /* num_filter and channels divisible by num_group */
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=6, num_group=4)"),
                    "t.sym:2:12: error: Convolution: num_filter=6 is not divisible by num_group=4\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=6, num_group=3)"),
                    "error: Convolution: 4 input channels are not divisible by num_group=3\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=6, num_group=0)"),
                    "error: Convolution: attribute 'num_group' must be between 1 and 2147483647, "
                    "got 0\n");
    /* ranks */
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=6, stride=(1,1,1))"),
                    "error: Convolution: stride has 3 values but the kernel has 2 dimensions\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(), num_filter=6)"),
                    "error: Convolution: kernel must have 1 to 3 dimensions, got 0\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(1,1,1,1), num_filter=6)"),
                    "error: Convolution: kernel must have 1 to 3 dimensions, got 4\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3,3), num_filter=6)"),
                    "error: Convolution needs input of rank 5, got [N,4,9,9] (rank 4)\n");
    /* required attributes and the bias slot */
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3))"),
                    "t.sym:2:12: error: Convolution: missing required attribute 'num_filter'\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, num_filter=3)"),
                    "error: Convolution: missing required attribute 'kernel'\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(1,1), num_filter=2, no_bias=true, "
                                      "bias=param())"),
                    "error: Convolution: input 'bias' given, but no_bias=true\n");
    /* the batch dimension cannot be the channels */
    assert_contains(error_of(fx, "x: float32[4,N,9,9]", "Convolution(x, kernel=(3,3), num_filter=2)"),
                    "error: only the first dimension may be symbolic (the batch size)\n");
}

/* ---- Pooling ------------------------------------------------------------------- */

static void test_pool_shapes(void **state)
{
    Fx *fx = *state;
    static const struct {
        int x, k, s, p;
        const char *valid, *full;
    } cases[] = {
        /* valid floors (x + 2p - k) / s, full takes the ceiling; then + 1 */
        {7, 3, 2, 0, "[N,2,3,3]", "[N,2,3,3]"}, /* 4/2 exactly */
        {8, 3, 2, 0, "[N,2,3,3]", "[N,2,4,4]"}, /* 5/2 */
        {6, 3, 2, 0, "[N,2,2,2]", "[N,2,3,3]"}, /* 3/2 */
        {7, 3, 2, 1, "[N,2,4,4]", "[N,2,4,4]"}, /* 6/2 */
        {112, 3, 2, 1, "[N,2,56,56]", "[N,2,57,57]"}, /* the ResNet stem's max pool */
        {5, 2, 3, 0, "[N,2,2,2]", "[N,2,2,2]"}, /* 3/3 */
        {9, 2, 3, 0, "[N,2,3,3]", "[N,2,4,4]"}, /* 7/3 */
        {3, 3, 1, 0, "[N,2,1,1]", "[N,2,1,1]"}, /* the window is the input */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char in[64], e[160];
        snprintf(in, sizeof in, "x: float32[N,2,%d,%d]", cases[i].x, cases[i].x);
        snprintf(e, sizeof e, "Pooling(x, kernel=(%d,%d), stride=(%d,%d), pad=(%d,%d))",
                 cases[i].k, cases[i].k, cases[i].s, cases[i].s, cases[i].p, cases[i].p);
        assert_string_equal(out_shape(fx, in, e), cases[i].valid);
        assert_int_equal(node_enum(node(fx, "pool1"), POOL_CONVENTION), POOL_VALID);
        snprintf(e, sizeof e,
                 "Pooling(x, kernel=(%d,%d), stride=(%d,%d), pad=(%d,%d), pooling_convention=\"full\")",
                 cases[i].k, cases[i].k, cases[i].s, cases[i].s, cases[i].p, cases[i].p);
        assert_string_equal(out_shape(fx, in, e), cases[i].full);
        assert_int_equal(node_enum(node(fx, "pool1"), POOL_CONVENTION), POOL_FULL);
    }
    /* stride defaults to 1 */
    assert_string_equal(out_shape(fx, IMG, "Pooling(x, kernel=(2,2))"), "[N,4,8,8]");
    assert_int_equal(node_tuple(node(fx, "pool1"), POOL_STRIDE)->t.v[0], 1);
    /* 1-D, 3-D, and a rectangular window */
    assert_string_equal(out_shape(fx, "x: float32[N,3,10]", "Pooling(x, kernel=(3,), stride=(3,))"),
                        "[N,3,3]");
    assert_string_equal(out_shape(fx, "x: float32[N,3,4,6,8]",
                                  "Pooling(x, kernel=(2,2,2), stride=(2,2,2), pool_type=\"avg\")"),
                        "[N,3,2,3,4]");
    assert_string_equal(out_shape(fx, "x: float32[N,3,9,12]",
                                  "Pooling(x, kernel=(3,4), stride=(3,4), pool_type=\"sum\")"),
                        "[N,3,3,3]");
    assert_int_equal(node_enum(node(fx, "pool1"), POOL_POOL_TYPE), POOL_SUM);
}

static void test_pool_global_and_attrs(void **state)
{
    Fx *fx = *state;
    /* global pooling ignores kernel, stride and pad */
    assert_string_equal(out_shape(fx, "x: float32[N,3,7,9]",
                                  "Pooling(x, pool_type=\"avg\", global_pool=true)"),
                        "[N,3,1,1]");
    assert_string_equal(out_shape(fx, "x: float32[N,3,7,9]",
                                  "Pooling(x, kernel=(3,3), stride=(2,2), global_pool=true)"),
                        "[N,3,1,1]");
    assert_string_equal(out_shape(fx, "x: float32[N,3,7]", "Pooling(x, global_pool=true)"), "[N,3,1]");
    assert_string_equal(out_shape(fx, "x: float32[N,3,7,8,9]", "Pooling(x, global_pool=true)"),
                        "[N,3,1,1,1]");
    assert_contains(error_of(fx, "x: float32[N,3]", "Pooling(x, global_pool=true)"),
                    "error: Pooling needs input of rank 3 to 5, got [N,3] (rank 2)\n");
    /* count_include_pad is kept as written (default true) */
    out_shape(fx, IMG, "Pooling(x, kernel=(3,3), pad=(1,1), pool_type=\"avg\", count_include_pad=false)");
    assert_false(node_bool(node(fx, "pool1"), POOL_COUNT_INCLUDE_PAD));
    assert_int_equal(node_enum(node(fx, "pool1"), POOL_POOL_TYPE), POOL_AVG);
    out_shape(fx, IMG, "Pooling(x, kernel=(3,3), pad=(1,1), pool_type=\"avg\")");
    assert_true(node_bool(node(fx, "pool1"), POOL_COUNT_INCLUDE_PAD));
    assert_int_equal(node_enum(node(fx, "pool1"), POOL_POOL_TYPE), POOL_AVG);
    out_shape(fx, IMG, "Pooling(x, kernel=(3,3))");
    assert_int_equal(node_enum(node(fx, "pool1"), POOL_POOL_TYPE), POOL_MAX);
}

static void test_pool_errors(void **state)
{
    Fx *fx = *state;
    assert_contains(error_of(fx, IMG, "Pooling(x)"),
                    "t.sym:2:12: error: Pooling: kernel must have 1 to 3 dimensions (or set "
                    "global_pool=true)\n");
    assert_contains(error_of(fx, IMG, "Pooling(x, kernel=(2,2,2,2))"),
                    "error: Pooling: kernel must have 1 to 3 dimensions (or set global_pool=true)\n");
    assert_contains(error_of(fx, IMG, "Pooling(x, kernel=(2,2), pad=(2,0))"),
                    "t.sym:2:12: error: Pooling: pad 2 must be smaller than the kernel 2\n");
    assert_contains(error_of(fx, "x: float32[N,3,2,2]", "Pooling(x, kernel=(3,3))"),
                    "error: Pooling: the output would be smaller than one pixel (input [N,3,2,2], "
                    "kernel 3 on axis 2)\n");
    assert_contains(error_of(fx, IMG, "Pooling(x, kernel=(3,3), stride=(2,))"),
                    "error: Pooling: stride has 1 values but the kernel has 2 dimensions\n");
    assert_contains(error_of(fx, IMG, "Pooling(x, kernel=(3,))"),
                    "error: Pooling needs input of rank 3, got [N,4,9,9] (rank 4)\n");
    assert_contains(error_of(fx, IMG, "Pooling(x, kernel=(3,3), pool_type=\"mean\")"),
                    "t.sym:2:47: error: Pooling: pool_type=\"mean\" is not one of \"max\", \"avg\", "
                    "\"sum\"\n");
    assert_contains(error_of(fx, IMG, "Pooling(x, kernel=(3,3), pooling_convention=\"same\")"),
                    "error: Pooling: pooling_convention=\"same\" is not one of \"valid\", \"full\"\n");
    assert_contains(error_of(fx, IMG, "Pooling(x, kernel=(3,3), global_pool=1)"),
                    "error: Pooling: attribute 'global_pool' must be true or false, got int\n");
}

/* ---- FullyConnected, BatchNorm ------------------------------------------------- */

static void test_fc(void **state)
{
    Fx *fx = *state;
    /* flatten=true: everything after the batch dimension is one input */
    assert_string_equal(out_shape(fx, "x: float32[N,3,4,5]", "FullyConnected(x, num_hidden=7)"),
                        "[N,7]");
    assert_string_equal(node_shape(fx, "fc1_weight"), "[7,60]");
    assert_string_equal(node_shape(fx, "fc1_bias"), "[7]");
    assert_int_equal(node_param_kind(node(fx, "fc1_weight")), PK_WEIGHT);
    assert_int_equal(node_param_kind(node(fx, "fc1_bias")), PK_BIAS);
    assert_string_equal(out_shape(fx, "x: float32[N,64]", "FullyConnected(x, num_hidden=10)"), "[N,10]");
    assert_string_equal(node_shape(fx, "fc1_weight"), "[10,64]");
    /* flatten=false: applied to the last axis */
    assert_string_equal(out_shape(fx, "x: float32[N,3,4,5]",
                                  "FullyConnected(x, num_hidden=7, flatten=false, no_bias=true)"),
                        "[N,3,4,7]");
    assert_string_equal(node_shape(fx, "fc1_weight"), "[7,5]");
    assert_null(graph_find(fx->g, "fc1_bias"));
    /* wrong ranks */
    assert_contains(error_of(fx, "x: float32[N]", "FullyConnected(x, num_hidden=7)"),
                    "t.sym:2:12: error: FullyConnected needs input of rank 2 to 8, got [N] (rank 1)\n");
    assert_contains(error_of(fx, "x: float32[N]", "FullyConnected(x, num_hidden=7, flatten=false)"),
                    "error: FullyConnected: input dimension 0 must be a constant\n");
    assert_contains(error_of(fx, "x: float32[N,3,4,5]",
                             "FullyConnected(x, num_hidden=7, weight=param(shape=(7,59)))"),
                    "error: FullyConnected: weight shape [7,59] does not match the expected [7,60]\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "FullyConnected(x, num_hidden=0)"),
                    "error: FullyConnected: attribute 'num_hidden' must be between 1 and "
                    "2147483647, got 0\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "FullyConnected(x)"),
                    "error: FullyConnected: missing required attribute 'num_hidden'\n");
}

static void test_batchnorm(void **state)
{
    Fx *fx = *state;
    static const char *const suffixes[] = {"gamma", "beta", "moving_mean", "moving_var"};
    static const int kinds[] = {PK_GAMMA, PK_BETA, PK_MOVING_MEAN, PK_MOVING_VAR};
    assert_string_equal(out_shape(fx, "x: float32[N,3,4,5]", "BatchNorm(x)"), "[N,3,4,5]");
    const Node *bn = node(fx, "bn1");
    assert_int_equal(bn->nin, 5);
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "bn1_%s", suffixes[i]);
        assert_string_equal(node_shape(fx, name), "[3]");
        assert_int_equal(node_param_kind(node(fx, name)), kinds[i]);
        assert_int_equal(bn->in[i + 1], node(fx, name)->id);
    }
    /* axis picks the channel dimension, negative counts from the end */
    out_shape(fx, "x: float32[N,3,4,5]", "BatchNorm(x, axis=-1)");
    assert_string_equal(node_shape(fx, "bn1_gamma"), "[5]");
    assert_string_equal(node_shape(fx, "bn1_moving_var"), "[5]");
    out_shape(fx, "x: float32[N,3,4,5]", "BatchNorm(x, axis=2)");
    assert_string_equal(node_shape(fx, "bn1_beta"), "[4]");
    out_shape(fx, "x: float32[N,6]", "BatchNorm(x)");
    assert_string_equal(node_shape(fx, "bn1_moving_mean"), "[6]");
    assert_contains(error_of(fx, "x: float32[N,3,4,5]", "BatchNorm(x, axis=4)"),
                    "t.sym:2:12: error: BatchNorm: axis 4 is out of range for rank 4\n");
    assert_contains(error_of(fx, "x: float32[N,3,4,5]", "BatchNorm(x, axis=-5)"),
                    "error: BatchNorm: axis -5 is out of range for rank 4\n");
    assert_contains(error_of(fx, "x: float32[N,3,4,5]", "BatchNorm(x, axis=0)"),
                    "error: BatchNorm: the channel axis must not be the batch dimension\n");
    assert_contains(error_of(fx, "x: float32[N,3,4,5]", "BatchNorm(x, gamma=param(shape=(4,)))"),
                    "error: BatchNorm: gamma shape [4] does not match the expected [3] (input has "
                    "3 channels)\n");
    assert_contains(error_of(fx, "x: float32[N,3,4,5]",
                             "BatchNorm(x, moving_var=param(shape=(3,1)))"),
                    "error: BatchNorm: moving_var shape [3,1] does not match the expected [3] "
                    "(input has 3 channels)\n");
    assert_contains(error_of(fx, "x: float32[N]", "BatchNorm(x)"),
                    "error: BatchNorm needs input of rank 2 to 8, got [N] (rank 1)\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "BatchNorm(x, momentum=1.5)"),
                    "error: BatchNorm: attribute 'momentum' must be between 0 and 1, got 1.5\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "BatchNorm(x, eps=0)"),
                    "error: BatchNorm: attribute 'eps' must be between 1e-30 and 1e+30, got 0\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "BatchNorm(x, axis=9)"),
                    "error: BatchNorm: attribute 'axis' must be between -8 and 7, got 9\n");
}

/* ---- layout: Flatten, Reshape, Concat --------------------------------------------- */

static void test_flatten(void **state)
{
    Fx *fx = *state;
    assert_string_equal(out_shape(fx, "x: float32[N,6,4]", "Flatten(x)"), "[N,24]");
    assert_string_equal(out_shape(fx, "x: float32[N,3,4,5]", "Flatten(x)"), "[N,60]");
    assert_string_equal(out_shape(fx, "x: float32[N,7]", "Flatten(x)"), "[N,7]");
    assert_string_equal(out_shape(fx, "x: float32[N]", "Flatten(x)"), "[N,1]");
    assert_contains(error_of(fx, "x: float32[N,3]", "Flatten(x, 1)"),
                    "error: Flatten takes at most 1 positional argument\n");
}

static void test_reshape(void **state)
{
    Fx *fx = *state;
    static const struct {
        const char *in, *shape, *want;
    } ok[] = {
        {"[N,3,4]", "(-1,12)", "[N,12]"},
        {"[N,3,4]", "(0,-1)", "[N,12]"},
        {"[N,3,4]", "(0,12)", "[N,12]"},
        {"[N,3,4]", "(-1,4,3)", "[N,4,3]"},
        {"[N,3,4]", "(0,0,2,2)", "[N,3,2,2]"},
        {"[N,3,4]", "(0,0,0,-1)", "[N,3,4,1]"},
        {"[N,3,4]", "(-1,)", "[12N]"},
        {"[N,3,4]", "(12,-1)", "[12,N]"},
        {"[N,3,4]", "(2,-1)", "[2,6N]"},
        {"[N,3,4]", "(0,2,-1)", "[N,2,6]"},
        {"[N,12]", "(0,3,4)", "[N,3,4]"},
        {"[2,3,4]", "(6,-1)", "[6,4]"},
        {"[2,3,4]", "(24,)", "[24]"},
        {"[N,1,1]", "(0,)", "[N]"},
        {"[4]", "(2,2)", "[2,2]"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char in[64], e[64];
        snprintf(in, sizeof in, "x: float32%s", ok[i].in);
        snprintf(e, sizeof e, "Reshape(x, shape=%s)", ok[i].shape);
        const char *got = out_shape(fx, in, e);
        if (strcmp(got, ok[i].want) != 0)
            fail_msg("%s reshaped to %s gives %s, expected %s", ok[i].in, ok[i].shape, got, ok[i].want);
    }
    /* the shape as a positional attribute */
    assert_string_equal(out_shape(fx, "x: float32[N,3,4]", "Reshape(x, (0,-1))"), "[N,12]");
    static const struct {
        const char *in, *shape, *want;
    } bad[] = {
        {"[N,3,4]", "(0,5)", "Reshape: cannot reshape [N,3,4] into a shape of a different size\n"},
        {"[N,3,4]", "(13,-1)", "Reshape: cannot infer -1: [N,3,4] does not divide into the fixed dims\n"},
        {"[N,3,4]", "(0,7,-1)", "Reshape: cannot infer -1: [N,3,4] does not divide into the fixed dims\n"},
        {"[N,3,4]", "(0,-1,-1)", "Reshape: at most one -1 may appear in shape\n"},
        {"[N,3,4]", "(0,0,0,0)",
         "Reshape: 0 at position 3 copies a dimension the input [N,3,4] does not have\n"},
        {"[N,3,4]", "(12,3)", "Reshape: cannot reshape [N,3,4] into a shape of a different size\n"},
        {"[N,3,4]", "()", "Reshape: cannot reshape [N,3,4] into a shape of a different size\n"},
        {"[N,3,4]", "(0,0,-2)", "Reshape: attribute 'shape' values must be between -1 and 2147483647, got -2\n"},
        {"[2,3]", "(0,-1,0)", "Reshape: 0 at position 2 copies a dimension the input [2,3] does not have\n"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char in[64], e[64];
        snprintf(in, sizeof in, "x: float32%s", bad[i].in);
        snprintf(e, sizeof e, "Reshape(x, shape=%s)", bad[i].shape);
        assert_contains(error_of(fx, in, e), bad[i].want);
    }
    assert_contains(error_of(fx, "x: float32[N,3]", "Reshape(x)"),
                    "t.sym:2:12: error: Reshape: missing required attribute 'shape'\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "Reshape(x, shape=3)"),
                    "error: Reshape: attribute 'shape' must be a tuple such as (3,3), got int\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "Reshape(x, (3,-1), 5)"),
                    "t.sym:2:31: error: Reshape takes at most 2 positional arguments\n");
}

static void test_concat(void **state)
{
    Fx *fx = *state;
    const char *xy = "x: float32[N,3,4], y: float32[N,5,4]";
    assert_string_equal(out_shape(fx, xy, "Concat(x, y, dim=1)"), "[N,8,4]");
    assert_int_equal(node(fx, "concat1")->nin, 2);
    assert_string_equal(out_shape(fx, xy, "Concat(x, y)"), "[N,8,4]"); /* dim=1 by default */
    assert_int_equal(node_int(node(fx, "concat1"), CONCAT_DIM), 1);
    assert_string_equal(out_shape(fx, xy, "Concat(x, y, dim=-2)"), "[N,8,4]");
    assert_string_equal(out_shape(fx, xy, "Concat(x, y, x, y, x)"), "[N,19,4]");
    assert_string_equal(out_shape(fx, xy, "Concat(x)"), "[N,3,4]");
    assert_string_equal(out_shape(fx, xy, "Concat(x, y, 1)"), "[N,8,4]"); /* dim positional */
    assert_string_equal(out_shape(fx, "x: float32[N,3,4]", "Concat(x, x, dim=2)"), "[N,3,8]");
    /* along the batch: N + N = 2N */
    assert_string_equal(out_shape(fx, "x: float32[N,3,4]", "Concat(x, x, dim=0)"), "[2N,3,4]");
    /* mismatches */
    assert_contains(error_of(fx, "x: float32[N,3,4], y: float32[N,3,5]", "Concat(x, y, dim=1)"),
                    "t.sym:2:12: error: Concat: input 2 has shape [N,3,5], which does not match "
                    "[N,3,4] except on dim 1\n");
    assert_contains(error_of(fx, "x: float32[N,3,4], y: float32[N,3,4], z: float32[N,2,5]",
                             "Concat(x, y, z)"),
                    "error: Concat: input 3 has shape [N,2,5], which does not match [N,3,4] "
                    "except on dim 1\n");
    assert_contains(error_of(fx, "x: float32[N,3,4], y: float32[N,3]", "Concat(x, y)"),
                    "error: Concat needs input of rank 3, got [N,3] (rank 2)\n");
    assert_contains(error_of(fx, "x: float32[N,3,4]", "Concat(x, x, dim=3)"),
                    "error: Concat: dim 3 is out of range for rank 3\n");
    assert_contains(error_of(fx, "x: float32[N,3,4]", "Concat(x, x, dim=-4)"),
                    "error: Concat: dim -4 is out of range for rank 3\n");
    assert_contains(error_of(fx, "x: float32[N,3,4], y: float32[2,3,4]", "Concat(x, y, dim=0)"),
                    "error: Concat: cannot join a batch-sized and a fixed dimension\n");
    assert_contains(error_of(fx, "x: float32[N,3,4]", "Concat(dim=1)"),
                    "t.sym:2:12: error: Concat needs at least one input\n");
    assert_contains(error_of(fx, "x: float32[N,3,4]", "Concat(x, x, dim=8)"),
                    "error: Concat: attribute 'dim' must be between -8 and 7, got 8\n");
}

/* ---- elementwise, broadcast, scalar ------------------------------------------------ */

static void test_elementwise(void **state)
{
    Fx *fx = *state;
    const char *xy = "x: float32[N,3,4], y: float32[N,3,4]";
    static const struct {
        const char *expr;
        OpKind op;
    } ok[] = {
        {"x + y", OP_elemwise_add},
        {"x - y", OP_elemwise_sub},
        {"x * y", OP_elemwise_mul},
        {"elemwise_add(x, y)", OP_elemwise_add},
        {"elemwise_sub(lhs=x, rhs=y)", OP_elemwise_sub},
        {"elemwise_mul(x, rhs=y)", OP_elemwise_mul},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_string_equal(out_shape(fx, xy, ok[i].expr), "[N,3,4]");
        const Node *n = fx->g->nodes[fx->g->outputs[0]];
        assert_int_equal(n->op, ok[i].op);
        assert_int_equal(n->nin, 2);
        assert_string_equal(fx->g->nodes[n->in[0]]->name, "x");
        assert_string_equal(fx->g->nodes[n->in[1]]->name, "y");
    }
    /* broadcasting is offered only where it would help */
    const char *mis = "x: float32[N,3,4], y: float32[N,3,5]";
    assert_contains(error_of(fx, mis, "x + y"),
                    "t.sym:2:14: error: shape mismatch in '+': [N,3,4] vs [N,3,5] (they do not "
                    "broadcast either: one side needs a projection to the other's shape)\n");
    const char *bc = "x: float32[N,3,4], y: float32[N,3,1]";
    assert_contains(error_of(fx, bc, "x + y"),
                    "t.sym:2:14: error: shape mismatch in '+': [N,3,4] vs [N,3,1] (use "
                    "broadcast_add to broadcast)\n");
    assert_contains(error_of(fx, bc, "x * y"),
                    "t.sym:2:14: error: shape mismatch in '*': [N,3,4] vs [N,3,1] (use "
                    "broadcast_mul to broadcast)\n");
    assert_contains(error_of(fx, mis, "x - y"), "error: shape mismatch in '-': [N,3,4] vs [N,3,5]");
    /* elementwise ops do not broadcast, even from 1 */
    assert_contains(error_of(fx, "x: float32[N,3,4], y: float32[1,3,4]", "x + y"),
                    "error: shape mismatch in '+': [N,3,4] vs [1,3,4]");
    assert_contains(error_of(fx, "x: float32[N,3,4], y: float32[N,3]", "x * y"),
                    "error: shape mismatch in '*': [N,3,4] vs [N,3]");
    assert_contains(error_of(fx, xy, "x / y"),
                    "t.sym:2:14: error: operator '/' is not defined on two tensors\n");
    assert_contains(error_of(fx, xy, "x % y"), "error: operator '%' is not defined on two tensors\n");
    assert_contains(error_of(fx, xy, "elemwise_add(x)"),
                    "t.sym:2:12: error: elemwise_add: missing input 'rhs'\n");
}

static void test_broadcast(void **state)
{
    Fx *fx = *state;
    static const struct {
        const char *a, *b, *want;
    } ok[] = {
        {"[N,3,4]", "[3,1]", "[N,3,4]"},   /* trailing alignment */
        {"[N,1,4]", "[5,1]", "[N,5,4]"},   /* both sides stretch */
        {"[N,3,4]", "[4]", "[N,3,4]"},
        {"[N,3,4]", "[1,3,4]", "[N,3,4]"}, /* 1 stretches to N */
        {"[1,3,4]", "[N,1,1]", "[N,3,4]"},
        {"[N,3,4]", "[N,3,4]", "[N,3,4]"},
        {"[3,1]", "[1,4]", "[3,4]"},
        {"[N,3]", "[]", "[N,3]"},          /* a rank-0 tensor */
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char in[96];
        snprintf(in, sizeof in, "x: float32%s, y: float32%s", ok[i].a, ok[i].b);
        if (strcmp(ok[i].b, "[]") == 0)
            snprintf(in, sizeof in, "x: float32%s", ok[i].a);
        const char *e = strcmp(ok[i].b, "[]") == 0 ? "broadcast_add(x, sum(x))" : "broadcast_add(x, y)";
        assert_string_equal(out_shape(fx, in, e), ok[i].want);
        if (strcmp(ok[i].b, "[]") != 0) {
            assert_string_equal(out_shape(fx, in, "broadcast_mul(y, x)"), ok[i].want);
            assert_int_equal(fx->g->nodes[fx->g->outputs[0]]->op, OP_broadcast_mul);
        }
    }
    assert_contains(error_of(fx, "x: float32[N,3,4], y: float32[2,4]", "broadcast_mul(x, y)"),
                    "t.sym:2:12: error: broadcast_mul: shapes [N,3,4] and [2,4] do not broadcast "
                    "(axis 1: 3 vs 2)\n");
    assert_contains(error_of(fx, "x: float32[N,3,4], y: float32[2,3,4]", "broadcast_add(x, y)"),
                    "error: broadcast_add: shapes [N,3,4] and [2,3,4] do not broadcast (axis 0: "
                    "N vs 2)\n");
}

static void test_scalar_ops(void **state)
{
    Fx *fx = *state;
    static const struct {
        const char *expr;
        OpKind op;
        double scalar;
    } cases[] = {
        {"x * 2", OP__mul_scalar, 2},      {"3 * x", OP__mul_scalar, 3},
        {"x + 1.5", OP__plus_scalar, 1.5}, {"2 + x", OP__plus_scalar, 2},
        {"x - 1", OP__minus_scalar, 1},    {"2 - x", OP__rminus_scalar, 2},
        {"x / 4", OP__div_scalar, 4},      {"1 / x", OP__rdiv_scalar, 1},
        {"-x", OP__mul_scalar, -1},        {"x * (2 + 3) / 10", OP__div_scalar, 10},
        {"x * -0.5", OP__mul_scalar, -0.5},
        {"_plus_scalar(x, scalar=7)", OP__plus_scalar, 7},
        {"_rdiv_scalar(x, 0.25)", OP__rdiv_scalar, 0.25},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_string_equal(out_shape(fx, "x: float32[N,3,4]", cases[i].expr), "[N,3,4]");
        const Node *n = fx->g->nodes[fx->g->outputs[0]];
        if (n->op != cases[i].op)
            fail_msg("%s gave %s", cases[i].expr, op_info(n->op)->name);
        assert_true(node_float(n, SCALAR_SCALAR) == cases[i].scalar);
        assert_int_equal(n->dtype, DT_F32);
    }
    /* x * (2 + 3) / 10 folds 2 + 3 and makes two nodes */
    out_shape(fx, "x: float32[N,3,4]", "x * (2 + 3) / 10");
    assert_true(node_float(node(fx, "mul_scalar1"), SCALAR_SCALAR) == 5);
    assert_contains(error_of(fx, "x: float32[N,3]", "x + \"a\""),
                    "t.sym:2:14: error: operator '+' between a tensor and a string\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "x * true"),
                    "error: operator '*' between a tensor and a bool\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "x % 2"),
                    "error: operator '%' is not defined on tensors\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "_plus_scalar(x)"),
                    "error: _plus_scalar: missing required attribute 'scalar'\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "_plus_scalar(x, scalar=1e301)"),
                    "error: _plus_scalar: attribute 'scalar' must be between -1e+300 and 1e+300, "
                    "got 1e+301\n");
    /* what folds to inf would be such a scalar too */
    assert_contains(error_of(fx, "x: float32[N,3]", "x * (1e300 * 1e10)"),
                    "t.sym:2:23: error: floating-point overflow in '*'\n");
}

/* ---- unary, Cast, activations ------------------------------------------------------- */

static void test_cast(void **state)
{
    Fx *fx = *state;
    static const struct {
        const char *expr;
        DType dt;
    } ok[] = {
        {"Cast(x, float16)", DT_F16},           /* dtype positional after the data slot */
        {"Cast(x, dtype=bfloat16)", DT_BF16},
        {"Cast(x, dtype=\"float64\")", DT_F64},
        {"Cast(x, dtype=\"f16\")", DT_F16},     /* a string may use the short spelling */
        {"Cast(Cast(x, float16), float32)", DT_F32},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_string_equal(out_shape(fx, "x: float32[N,3,4]", ok[i].expr), "[N,3,4]");
        const Node *n = fx->g->nodes[fx->g->outputs[0]];
        assert_int_equal(n->op, OP_Cast);
        assert_int_equal(n->dtype, ok[i].dt);
        assert_int_equal(n->attrs[CAST_DTYPE].e, ok[i].dt);
    }
    assert_contains(error_of(fx, "x: float32[N,3]", "Cast(x)"),
                    "t.sym:2:12: error: Cast: missing required attribute 'dtype'\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "Cast(x, dtype=3)"),
                    "t.sym:2:26: error: Cast: attribute 'dtype' must be a dtype: one of float16, "
                    "bfloat16, float32, float64, int8, uint8, int32, int64\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "Cast(x, dtype=\"half\")"),
                    "error: Cast: attribute 'dtype' must be a dtype: one of float16,");
    assert_contains(error_of(fx, "x: float32[N,3]", "Cast(x, dtype=float17)"),
                    "t.sym:2:26: error: undefined name 'float17' (did you mean 'float16'?)\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "Cast(x, int32)"),
                    "t.sym:2:12: error: Cast: dtype must be a floating-point type (float16, "
                    "bfloat16, float32, float64), not int32\n");
}

static void test_unary_and_activations(void **state)
{
    Fx *fx = *state;
    static const char *const acts[] = {"relu", "sigmoid", "tanh", "softrelu", "softsign"};
    for (int i = 0; i < 5; i++) {
        char e[64];
        snprintf(e, sizeof e, "Activation(x, act_type=\"%s\")", acts[i]);
        assert_string_equal(out_shape(fx, "x: float32[N,3,4]", e), "[N,3,4]");
        assert_int_equal(node_enum(node(fx, "act1"), ACT_TYPE), i);
    }
    assert_string_equal(out_shape(fx, "x: float32[N,3,4]", "Activation(x, \"tanh\")"), "[N,3,4]");
    assert_int_equal(node_enum(node(fx, "act1"), ACT_TYPE), ACT_TANH);
    assert_string_equal(out_shape(fx, "x: float32[N]", "sqrt(exp(log(x)))"), "[N]");
    assert_contains(error_of(fx, "x: float32[N,3]", "Activation(x)"),
                    "t.sym:2:12: error: Activation: missing required attribute 'act_type'\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "exp(x, 1)"),
                    "error: exp takes at most 1 positional argument\n");
    assert_contains(error_of(fx, "x: float32[N,3]", "exp()"), "error: exp: missing input 'data'\n");
}

static void test_leaky_relu(void **state)
{
    Fx *fx = *state;
    assert_string_equal(out_shape(fx, "x: float32[N,6,4]", "LeakyReLU(x)"), "[N,6,4]");
    const Node *n = node(fx, "leakyrelu1");
    assert_int_equal(node_enum(n, LRELU_TYPE), LRELU_LEAKY);
    assert_true(node_float(n, LRELU_SLOPE) == 0.25);
    assert_int_equal(n->nin, 1);
    out_shape(fx, "x: float32[N,6,4]", "LeakyReLU(x, act_type=\"elu\", slope=0.1)");
    assert_true(node_float(node(fx, "leakyrelu1"), LRELU_SLOPE) == 0.1);
    /* prelu: one slope per channel (axis 1), an implicit gamma */
    assert_string_equal(out_shape(fx, "x: float32[N,6,4]", "LeakyReLU(x, act_type=\"prelu\")"), "[N,6,4]");
    assert_string_equal(node_shape(fx, "leakyrelu1_gamma"), "[6]");
    assert_int_equal(node_param_kind(node(fx, "leakyrelu1_gamma")), PK_GAMMA);
    assert_int_equal(node(fx, "leakyrelu1")->nin, 2);
    assert_string_equal(out_shape(fx, "x: float32[N,6,4]",
                                  "LeakyReLU(x, act_type=\"prelu\", gamma=param(shape=(6,), "
                                  "init=msra_prelu(slope=0.25)))"),
                        "[N,6,4]");
    assert_string_equal(node(fx, "leakyrelu1_gamma")->attrs[PARAM_INIT].s, "msra_prelu(slope=0.25)");
    assert_contains(error_of(fx, "x: float32[N,6,4]",
                             "LeakyReLU(x, act_type=\"prelu\", gamma=param(shape=(4,)))"),
                    "t.sym:2:12: error: LeakyReLU: gamma shape [4] does not match the expected [6]\n");
    assert_contains(error_of(fx, "x: float32[N,6,4]", "LeakyReLU(x, gamma=param(shape=(6,)))"),
                    "t.sym:2:31: error: LeakyReLU: input 'gamma' given, but only "
                    "act_type=\"prelu\" takes it\n");
    assert_contains(error_of(fx, "x: float32[N]", "LeakyReLU(x, act_type=\"prelu\")"),
                    "error: LeakyReLU needs input of rank 2 to 8, got [N] (rank 1)\n");
    assert_contains(error_of(fx, "x: float32[N,6]", "LeakyReLU(x, act_type=\"gelu\")"),
                    "error: LeakyReLU: act_type=\"gelu\" is not one of \"leaky\", \"elu\", \"selu\", "
                    "\"prelu\"\n");
}

static void test_dropout(void **state)
{
    Fx *fx = *state;
    static const double ok[] = {0, 0.1, 0.5, 0.9, 0.999};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char e[64];
        snprintf(e, sizeof e, "Dropout(x, p=%g)", ok[i]);
        assert_string_equal(out_shape(fx, "x: float32[N,6]", e), "[N,6]");
        assert_true(node_float(node(fx, "dropout1"), DROPOUT_P) == ok[i]);
    }
    out_shape(fx, "x: float32[N,6]", "Dropout(x)");
    assert_true(node_float(node(fx, "dropout1"), DROPOUT_P) == 0.5);
    out_shape(fx, "x: float32[N,6]", "Dropout(x, 0.2)");
    assert_true(node_float(node(fx, "dropout1"), DROPOUT_P) == 0.2);
    out_shape(fx, "x: float32[N,6]", "Dropout(x, p=0)"); /* an int is a number too */
    assert_true(node_float(node(fx, "dropout1"), DROPOUT_P) == 0);
    assert_contains(error_of(fx, "x: float32[N,6]", "Dropout(x, p=1)"),
                    "t.sym:2:25: error: Dropout: attribute 'p' must be between 0 and 0.999999, got 1\n");
    assert_contains(error_of(fx, "x: float32[N,6]", "Dropout(x, p=-0.1)"),
                    "error: Dropout: attribute 'p' must be between 0 and 0.999999, got -0.1\n");
    assert_contains(error_of(fx, "x: float32[N,6]", "Dropout(x, p=\"half\")"),
                    "error: Dropout: attribute 'p' must be a number, got string\n");
}

/* ---- reductions, softmax, loss ---------------------------------------------------- */

static void test_softmax(void **state)
{
    Fx *fx = *state;
    assert_string_equal(out_shape(fx, "x: float32[N,3,4]", "softmax(x)"), "[N,3,4]");
    assert_int_equal(node_int(node(fx, "softmax1"), SOFTMAX_AXIS), -1);
    assert_string_equal(out_shape(fx, "x: float32[N,3,4]", "softmax(x, axis=1)"), "[N,3,4]");
    assert_string_equal(out_shape(fx, "x: float32[N,3,4]", "log_softmax(x, axis=-3)"), "[N,3,4]");
    assert_string_equal(out_shape(fx, "x: float32[N,3,4]", "softmax(x, 2)"), "[N,3,4]");
    assert_int_equal(node_int(node(fx, "softmax1"), SOFTMAX_AXIS), 2);
    assert_contains(error_of(fx, "x: float32[N,3,4]", "softmax(x, axis=3)"),
                    "t.sym:2:12: error: softmax: axis 3 is out of range for rank 3\n");
    assert_contains(error_of(fx, "x: float32[N,3,4]", "log_softmax(x, axis=-4)"),
                    "error: log_softmax: axis -4 is out of range for rank 3\n");
    assert_contains(error_of(fx, "x: float32[N,3,4]", "softmax(sum(x))"),
                    "error: softmax needs input of rank 1 to 8, got [] (rank 0)\n");
}

static void test_reduce(void **state)
{
    Fx *fx = *state;
    static const struct {
        const char *expr, *want;
    } ok[] = {
        {"sum(x)", "[]"},
        {"sum(x, keepdims=true)", "[1,1,1]"},
        {"sum(x, axis=(1,))", "[N,4]"},
        {"sum(x, axis=(0,))", "[3,4]"},
        {"mean(x, axis=(1,2), keepdims=true)", "[N,1,1]"},
        {"mean(x, axis=(2,1))", "[N]"},
        {"mean(x, axis=(-1,))", "[N,3]"},
        {"mean(x, axis=(-1,), keepdims=true)", "[N,3,1]"},
        {"sum(x, (1,), true)", "[N,1,4]"},
        {"sum(x, axis=(0,1,2))", "[]"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        const char *got = out_shape(fx, "x: float32[N,3,4]", ok[i].expr);
        if (strcmp(got, ok[i].want) != 0)
            fail_msg("%s gives %s, expected %s", ok[i].expr, got, ok[i].want);
    }
    assert_contains(error_of(fx, "x: float32[N,3,4]", "sum(x, axis=(1,1))"),
                    "t.sym:2:12: error: sum: axis 1 is out of range or repeated for rank 3\n");
    assert_contains(error_of(fx, "x: float32[N,3,4]", "sum(x, axis=(1,-2))"),
                    "error: sum: axis -2 is out of range or repeated for rank 3\n");
    assert_contains(error_of(fx, "x: float32[N,3,4]", "mean(x, axis=(3,))"),
                    "error: mean: axis 3 is out of range or repeated for rank 3\n");
    assert_contains(error_of(fx, "x: float32[N,3,4]", "sum(x, axis=1)"),
                    "error: sum: attribute 'axis' must be a tuple such as (3,3), got int\n");
    assert_contains(error_of(fx, "x: float32[N,3,4]", "sum(x, keepdims=\"yes\")"),
                    "error: sum: attribute 'keepdims' must be true or false, got string\n");
}

static void test_softmax_output(void **state)
{
    Fx *fx = *state;
    assert_string_equal(out_shape(fx, "x: float32[N,10], label: float32[N]", "SoftmaxOutput(x, label)"),
                        "[N,10]");
    const Node *n = node(fx, "softmax_output1");
    assert_int_equal(n->nin, 2);
    /* the input in the label slot becomes a label */
    assert_int_equal(node_enum(node(fx, "label"), INPUT_ROLE), INPUT_LABEL);
    assert_int_equal(node_enum(node(fx, "x"), INPUT_ROLE), INPUT_DATA);
    out_shape(fx, "x: float32[N,10], l: int32[N]",
              "SoftmaxOutput(data=x, label=l, normalization=\"batch\", smooth_alpha=0.1, "
              "grad_scale=2, use_ignore=true, ignore_label=3)");
    n = node(fx, "softmax_output1");
    assert_int_equal(node_enum(n, SMO_NORMALIZATION), SMO_NORM_BATCH);
    assert_true(node_float(n, SMO_SMOOTH_ALPHA) == 0.1);
    assert_true(node_float(n, SMO_GRAD_SCALE) == 2);
    assert_true(node_bool(n, SMO_USE_IGNORE));
    assert_true(node_float(n, SMO_IGNORE_LABEL) == 3);
    assert_int_equal(node(fx, "l")->dtype, DT_I32); /* labels keep their dtype */
    /* label shape: one per row */
    assert_contains(error_of(fx, "x: float32[N,10], l: float32[N,10]", "SoftmaxOutput(x, l)"),
                    "t.sym:2:12: error: SoftmaxOutput: the label must be [N] (one class index per row), "
                    "got [N,10]\n");
    assert_contains(error_of(fx, "x: float32[N,10], l: float32[5]", "SoftmaxOutput(x, l)"),
                    "error: SoftmaxOutput: label shape [5] does not match data [N,10] (one label "
                    "per row)\n");
    assert_contains(error_of(fx, "x: float32[N,10,3], l: float32[N]", "SoftmaxOutput(x, l)"),
                    "error: SoftmaxOutput needs input of rank 2, got [N,10,3] (rank 3)\n");
    assert_contains(error_of(fx, "x: float32[N,10]", "SoftmaxOutput(x)"),
                    "t.sym:2:12: error: SoftmaxOutput: missing input 'label'\n");
    assert_contains(error_of(fx, "x: float32[N,10], l: float32[N]", "SoftmaxOutput(x, l, smooth_alpha=2)"),
                    "error: SoftmaxOutput: attribute 'smooth_alpha' must be between 0 and 1, got 2\n");
    assert_contains(error_of(fx, "x: float32[N,10], l: float32[N]",
                             "SoftmaxOutput(x, l, normalization=\"mean\")"),
                    "error: SoftmaxOutput: normalization=\"mean\" is not one of \"null\", \"batch\", "
                    "\"valid\"\n");
}

/* ---- attribute checking in general -------------------------------------------------- */

static void test_attribute_checking(void **state)
{
    Fx *fx = *state;
    /* unknown names, with and without a suggestion */
    assert_contains(error_of(fx, IMG, "Activation(x, act_typ=\"relu\")"),
                    "t.sym:2:26: error: Activation has no attribute or input 'act_typ' (did you "
                    "mean 'act_type'?); it takes inputs data and attributes act_type "
                    "(docs/ops.md)\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=2, wieght=x)"),
                    "error: Convolution has no attribute or input 'wieght' (did you mean "
                    "'weight'?); it takes inputs data, weight, bias and attributes");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filters=2)"),
                    "error: Convolution has no attribute or input 'num_filters' (did you mean "
                    "'num_filter'?);");
    assert_contains(error_of(fx, IMG, "Pooling(x, kernel=(3,3), pooltype=\"max\")"),
                    "(did you mean 'pool_type'?); it takes inputs data and attributes kernel, "
                    "pool_type, global_pool, stride, pad, pooling_convention, count_include_pad "
                    "(docs/ops.md)\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, foo=3)"),
                    "t.sym:2:27: error: Convolution has no attribute or input 'foo'; it takes");
    /* wrong types */
    static const struct {
        const char *expr, *want;
    } types[] = {
        {"Convolution(x, kernel=(3,3), num_filter=2.0)",
         "Convolution: attribute 'num_filter' must be an int, got float"},
        {"Convolution(x, kernel=(3,3), num_filter=2, no_bias=1)",
         "Convolution: attribute 'no_bias' must be true or false, got int"},
        {"Convolution(x, kernel=3, num_filter=2)",
         "Convolution: attribute 'kernel' must be a tuple such as (3,3), got int"},
        {"Convolution(x, kernel=(3,2.0), num_filter=2)",
         "Convolution: attribute 'kernel' must hold ints, got a float"},
        {"Convolution(x, kernel=(3,3), num_filter=\"2\")",
         "Convolution: attribute 'num_filter' must be an int, got string"},
        {"Activation(x, act_type=3)", "Activation: attribute 'act_type' must be a string, got int"},
        {"LeakyReLU(x, slope=\"x\")", "LeakyReLU: attribute 'slope' must be a number, got string"},
        {"Activation(x, act_type=relu)", "undefined name 'relu'"},
        {"Convolution(x, kernel=(3,3), num_filter=2, weight=3)",
         "Convolution: input 'weight' must be a tensor, got int"},
        {"Activation(3, act_type=\"relu\")", "Activation: input 'data' must be a tensor, got int"},
        {"Convolution(x, kernel=(1,1,1,1,1,1,1,1,1), num_filter=2)",
         "Convolution: attribute 'kernel' has more than 8 values"},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        assert_contains(error_of(fx, IMG, types[i].expr), types[i].want);
    /* out of range */
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=0)"),
                    "t.sym:2:52: error: Convolution: attribute 'num_filter' must be between 1 and "
                    "2147483647, got 0\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=2147483648)"),
                    "error: Convolution: attribute 'num_filter' must be between 1 and 2147483647, "
                    "got 2147483648\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(2000000,1), num_filter=1)"),
                    "error: Convolution: attribute 'kernel' values must be between 1 and 1048576, "
                    "got 2000000\n");
    /* an enum outside its choices */
    assert_contains(error_of(fx, IMG, "Activation(x, act_type=\"gelu\")"),
                    "t.sym:2:35: error: Activation: act_type=\"gelu\" is not one of \"relu\", "
                    "\"sigmoid\", \"tanh\", \"softrelu\", \"softsign\"\n");
    /* twice */
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=2, kernel=(3,3))"),
                    "error: argument 'kernel' given twice\n");
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,3), num_filter=2, data=x)"),
                    "error: Convolution: input 'data' given twice\n");
    assert_contains(error_of(fx, IMG, "Activation(x, \"relu\", act_type=\"tanh\")"),
                    "error: Activation: attribute 'act_type' given twice\n");
    /* positional after named, too many positionals, name= must be a string */
    assert_contains(error_of(fx, IMG, "Convolution(x, kernel=(3,), num_filter=4, param(shape=(1,)))"),
                    "error: positional argument after a named one\n");
    assert_contains(error_of(fx, IMG, "Activation(x, \"relu\", 3)"),
                    "t.sym:2:34: error: Activation takes at most 2 positional arguments\n");
    assert_contains(error_of(fx, IMG, "Activation(x, act_type=\"relu\", name=3)"),
                    "error: name must be a non-empty string\n");
    /* positional attributes follow the slots in schema order */
    assert_string_equal(out_shape(fx, "x: float32[N,6,4]", "Reshape(x, (2,-1))"), "[2,12N]");
    assert_string_equal(out_shape(fx, "x: float32[N,6,4]", "Cast(x, float16)"), "[N,6,4]");
    assert_int_equal(fx->g->nodes[fx->g->outputs[0]]->dtype, DT_F16);
    assert_string_equal(out_shape(fx, IMG, "Pooling(x, (3,3), \"avg\", false, (2,2))"), "[N,4,4,4]");
    assert_int_equal(node_enum(node(fx, "pool1"), POOL_POOL_TYPE), POOL_AVG);
    /* a Concat's positional non-tensor is its first attribute */
    assert_string_equal(out_shape(fx, "x: float32[N,3,4]", "Concat(x, x, 2)"), "[N,3,8]");
    /* unknown ops */
    assert_contains(error_of(fx, IMG, "Convolutoin(x)"),
                    "t.sym:2:12: error: unknown op or function 'Convolutoin' (did you mean "
                    "'Convolution'?)\n");
    assert_contains(error_of(fx, IMG, "Input(x)"), "error: unknown op or function 'Input'\n");
}

static void test_explicit_param_shape_errors(void **state)
{
    Fx *fx = *state;
    /* a param whose shape nobody can infer */
    assert_contains(error_of(fx, "x: float32[N,3]", "broadcast_add(x, param())"),
                    "t.sym:2:12: error: broadcast_add: cannot infer the shape of parameter "
                    "'broadcast_add1_rhs': give param(shape=...)\n");
    /* a param read as data takes its dtype from the op's other data */
    assert_string_equal(out_shape(fx, "x: float32[N,4]", "broadcast_add(x, param(shape=(1,4)))"),
                        "[N,4]");
    assert_int_equal(node(fx, "broadcast_add1_rhs")->dtype, DT_F32);
    assert_string_equal(out_shape(fx, "x: float32[N,4]",
                                  "broadcast_mul(param(shape=(1,4)), Cast(x, float16))"),
                        "[N,4]");
    assert_int_equal(node(fx, "broadcast_mul1_lhs")->dtype, DT_F16);
    assert_string_equal(out_shape(fx, "x: float32[N,4]", "broadcast_add(x, exp(param(shape=(4,))))"),
                        "[N,4]");
    assert_int_equal(node(fx, "exp1_data")->dtype, DT_F32);
    /* Concat's parameters are named <node>_arg<k> */
    assert_string_equal(out_shape(fx, "x: float32[N,4]",
                                  "broadcast_add(x, Concat(param(shape=(1,2)), param(shape=(1,2))))"),
                        "[N,4]");
    assert_string_equal(node_shape(fx, "concat1_arg0"), "[1,2]");
    assert_string_equal(node_shape(fx, "concat1_arg1"), "[1,2]");
    /* and a param returned as it is, like an op of the model */
    assert_string_equal(out_shape(fx, "x: float32[N,4]", "(param(shape=(3,)), x)"), "[3]");
    assert_string_equal(node_shape(fx, "param1"), "[3]");
    assert_int_equal(node(fx, "param1")->dtype, DT_F32);
    assert_contains(error_of(fx, "x: float32[N,4]", "(param(), x)"),
                    "error: cannot infer the shape of parameter 'param1': give param(shape=...)\n");
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_every_op_infers_a_shape),
        T(test_pass_only_ops),
        T(test_conv_shapes),
        T(test_conv_errors),
        T(test_pool_shapes),
        T(test_pool_global_and_attrs),
        T(test_pool_errors),
        T(test_fc),
        T(test_batchnorm),
        T(test_flatten),
        T(test_reshape),
        T(test_concat),
        T(test_elementwise),
        T(test_broadcast),
        T(test_scalar_ops),
        T(test_cast),
        T(test_unary_and_activations),
        T(test_leaky_relu),
        T(test_dropout),
        T(test_softmax),
        T(test_reduce),
        T(test_softmax_output),
        T(test_attribute_checking),
        T(test_explicit_param_shape_errors),
    };
#undef T
    return cmocka_run_group_tests_name("ops", tests, NULL, NULL);
}
