/* test_passes.c - elaborate (the DSL's semantics and the naming rules),
 * infer-types (MXNet's dtype rules) and graph_stats on ResNet-50. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

/* elaborate + infer-shapes + infer-types on src, named t.sym. */
static Graph *compile_opts(Fx *fx, const char *src, const ElabOptions *opt)
{
    graph_free(fx->g);
    fx->off = strlen(diag_text(fx));
    Graph *g = frontend_elaborate(&fx->d, "t.sym", src, strlen(src), opt);
    if (g && (!infer_shapes(g) || !infer_types(g))) {
        graph_free(g);
        g = NULL;
    }
    fx->g = g;
    return g;
}

static Graph *compile(Fx *fx, const char *src) { return compile_opts(fx, src, NULL); }

static void must_compile(Fx *fx, const char *src)
{
    if (!compile(fx, src))
        fail_msg("compiling\n%s\nfailed:\n%s", src, last_diag(fx));
}

static const char *must_fail(Fx *fx, const char *src)
{
    if (compile(fx, src))
        fail_msg("compiling\n%s\nshould have failed", src);
    return last_diag(fx);
}

static const Node *node(Fx *fx, const char *name)
{
    const Node *n = graph_find(fx->g, name);
    if (!n)
        fail_msg("no node named '%s'", name);
    return n;
}

static const char *shape_of(Fx *fx, const char *name)
{
    return shape_str(&node(fx, name)->shape, fx->sbuf, sizeof fx->sbuf);
}

/* Builds "DEFS / model m(x) { BODY; return x + (EXPR) }": the expression is
 * folded into the scalar of one _plus_scalar node, whose value is returned.
 * The return line is line (lines in DEFS and BODY) + 3. */
static const char *scalar_src(Fx *fx, const char *defs, const char *body, const char *expr)
{
    snprintf(fx->src, sizeof fx->src, "%s\nmodel m(x: float32[N,2]) {\n%s\n    return x + (%s)\n}\n",
             defs, body, expr);
    return fx->src;
}

static double eval_in(Fx *fx, const char *defs, const char *body, const char *expr)
{
    must_compile(fx, scalar_src(fx, defs, body, expr));
    const Node *n = fx->g->nodes[fx->g->outputs[0]];
    if (n->op != OP__plus_scalar)
        fail_msg("%s did not fold to a number", expr);
    return node_float(n, SCALAR_SCALAR);
}

static double eval(Fx *fx, const char *expr) { return eval_in(fx, "", "", expr); }

/* The error of evaluating expr (with defs and body around it). */
static const char *eval_error_in(Fx *fx, const char *defs, const char *body, const char *expr)
{
    return must_fail(fx, scalar_src(fx, defs, body, expr));
}

static const char *eval_error(Fx *fx, const char *expr) { return eval_error_in(fx, "", "", expr); }

#define assert_eval(fx, expr, want)                                                    \
    do {                                                                               \
        double got_ = eval(fx, expr);                                                  \
        if (got_ != (double)(want))                                                    \
            fail_msg("%s = %.17g, expected %.17g", expr, got_, (double)(want));        \
    } while (0)

#define assert_num(expr_, want_)                                                       \
    do {                                                                               \
        double g_ = (expr_);                                                           \
        if (g_ != (double)(want_))                                                     \
            fail_msg("got %.17g, expected %.17g", g_, (double)(want_));                \
    } while (0)

/* ---- scalar arithmetic ------------------------------------------------------------- */

static void test_int_arithmetic(void **state)
{
    Fx *fx = *state;
    assert_eval(fx, "2 + 3 * 4", 14);
    assert_eval(fx, "(2 + 3) * 4", 20);
    assert_eval(fx, "10 - 2 - 3", 5);     /* left associative */
    assert_eval(fx, "64 / 4 / 2", 8);
    assert_eval(fx, "7 / 2", 3);          /* integer division */
    assert_eval(fx, "-7 / 2", -3);        /* truncates toward zero */
    assert_eval(fx, "7 / -2", -3);
    assert_eval(fx, "7 % 3", 1);
    assert_eval(fx, "-7 % 3", -1);        /* the sign of the dividend */
    assert_eval(fx, "7 % -3", 1);
    assert_eval(fx, "2 * 3 % 4", 2);
    assert_eval(fx, "-(3 - 5)", 2);
    assert_eval(fx, "--4", 4);
    assert_eval(fx, "(3 - 1) / 2 * 2", 2);
    assert_eval(fx, "1000000 * 1000000", 1e12);
    assert_eval(fx, "9223372036854775807 - 9223372036854775806", 1);
    assert_eval(fx, "(-9223372036854775807 - 1) % -1", 0); /* INT64_MIN % -1 is 0 */
    assert_eval(fx, "(-9223372036854775807 - 1) / 2", -4611686018427387904.0);
}

static void test_float_arithmetic(void **state)
{
    Fx *fx = *state;
    assert_eval(fx, "7.0 / 2", 3.5);
    assert_eval(fx, "7 / 2.0", 3.5);
    assert_eval(fx, "1 / 4.0", 0.25);
    assert_eval(fx, "3 * 1.5", 4.5);
    assert_eval(fx, "0.1 + 0.2", 0.1 + 0.2);
    assert_eval(fx, "1 - 0.75", 0.25);
    assert_eval(fx, "-2.5", -2.5);
    assert_eval(fx, "-(1.5 * 2)", -3.0);
    assert_eval(fx, "1e-5 * 1e5", 1e-5 * 1e5);
    assert_eval(fx, "2.5e3", 2500);
}

static void test_arithmetic_errors(void **state)
{
    Fx *fx = *state;
    /* the expression starts at column 17: "    return x + (" */
    assert_contains(eval_error(fx, "7 / 0"), "t.sym:4:19: error: integer division by zero\n");
    assert_contains(eval_error(fx, "7 % 0"), "t.sym:4:19: error: integer division by zero\n");
    assert_contains(eval_error(fx, "7.0 / 0"), "t.sym:4:21: error: division by zero\n");
    assert_contains(eval_error(fx, "7 / 0.0"), "error: division by zero\n");
    assert_contains(eval_error(fx, "7.5 % 2"), "t.sym:4:21: error: operator '%' needs integers\n");
    assert_contains(eval_error(fx, "9223372036854775807 + 1"),
                    "t.sym:4:37: error: integer overflow in '+'\n");
    assert_contains(eval_error(fx, "-9223372036854775807 - 2"), "error: integer overflow in '-'\n");
    assert_contains(eval_error(fx, "4611686018427387904 * 2"), "error: integer overflow in '*'\n");
    assert_contains(eval_error(fx, "3037000500 * 3037000500"), "error: integer overflow in '*'\n");
    assert_contains(eval_error(fx, "-(-9223372036854775807 - 1)"),
                    "t.sym:4:17: error: integer overflow in unary '-'\n");
    assert_contains(eval_error(fx, "(-9223372036854775807 - 1) / -1"),
                    "error: integer overflow in '/'\n");
    assert_contains(eval_error(fx, "1e308 * 10"), "t.sym:4:23: error: floating-point overflow in '*'\n");
    assert_contains(eval_error(fx, "1e308 + 1e308"), "error: floating-point overflow in '+'\n");
    assert_contains(eval_error(fx, "-1e308 - 1e308"), "error: floating-point overflow in '-'\n");
    assert_contains(eval_error(fx, "1e308 / 1e-10"), "error: floating-point overflow in '/'\n");
    assert_contains(eval_error(fx, "9223372036854775808"),
                    "error: integer literal '9223372036854775808' is too large\n");
    assert_contains(eval_error(fx, "\"a\" * 2"), "error: operator '*' is not defined on string and int\n");
    assert_contains(eval_error(fx, "true + 1"), "error: operator '+' is not defined on bool and int\n");
    assert_contains(eval_error(fx, "-\"a\""), "error: unary '-' is not defined on string\n");
    assert_contains(eval_error(fx, "(1,2) + 1"), "error: operator '+' is not defined on tuple and int\n");
    /* an arithmetic error inside a function names the call chain */
    assert_contains(eval_error_in(fx, "def f(n) = 100 / n\ndef g(n) = f(n - 1)", "", "g(1)"),
                    "t.sym:1:16: error: integer division by zero\n def f(n) = 100 / n\n"
                    "                ^\n"
                    "note: in call to 'f' from t.sym:2:12\n"
                    "note: in call to 'g' from t.sym:5:17\n");
}

/* ---- comparisons, logic, conditionals -------------------------------------------------- */

static void test_comparisons_and_logic(void **state)
{
    Fx *fx = *state;
    static const struct {
        const char *cond;
        bool want;
    } cases[] = {
        {"1 < 2", true},           {"2 < 2", false},          {"2 <= 2", true},
        {"3 > 2", true},           {"2 >= 3", false},         {"2.5 > 2", true},
        {"-1 < -0.5", true},       {"1 == 1", true},          {"1 == 1.0", true},
        {"1 != 1.0", false},       {"0.1 + 0.2 == 0.3", false},
        {"\"ab\" == \"a\" + \"b\"", true},                    {"\"a\" != \"b\"", true},
        {"true == true", true},    {"true != false", true},   {"1 == \"1\"", false},
        {"1 == true", false},      {"(1, 2) == (1, 2)", true}, {"(1, 2) != (1, 3)", true},
        {"(1, 2) == (1, 2, 3)", false}, {"() == ()", true},
        {"float16 == float16", true}, {"float16 == float32", false},
        {"true && true", true},    {"true && false", false},  {"false || true", true},
        {"false || false", false}, {"!true", false},          {"!(1 > 2)", true},
        {"1 < 2 && 2 < 3 || false", true},
        {"false && true || true", true},  /* && binds tighter than || */
        {"true || true && false", true},
        {"9223372036854775807 > 9223372036854775806", true}, /* compared as ints, not doubles */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char e[160];
        snprintf(e, sizeof e, "(%s) ? 1 : 0", cases[i].cond);
        double got = eval(fx, e);
        if (got != (cases[i].want ? 1 : 0))
            fail_msg("%s gave %g", cases[i].cond, got);
    }
    assert_contains(eval_error(fx, "(\"a\" < \"b\") ? 1 : 0"),
                    "error: comparison needs numbers, got string and string\n");
    assert_contains(eval_error(fx, "(1 < true) ? 1 : 0"),
                    "error: comparison needs numbers, got int and bool\n");
    assert_contains(eval_error(fx, "(x < 1) ? 1 : 0"),
                    "error: comparison needs numbers, got tensor and int\n");
    assert_contains(eval_error(fx, "!1 ? 1 : 0"), "error: the operand of '!' must be a bool, got int\n");
}

static void test_short_circuit(void **state)
{
    Fx *fx = *state;
    /* the right side is not evaluated: its division by zero never happens */
    assert_eval(fx, "(false && 1 / 0 == 0) ? 1 : 2", 2);
    assert_eval(fx, "(true || 1 / 0 == 0) ? 1 : 2", 1);
    assert_eval(fx, "(false && undefined_name) ? 1 : 2", 2);
    assert_eval(fx, "(true || 7) ? 1 : 2", 1); /* not even its type is checked */
    /* and no op is created on the skipped side */
    must_compile(fx, "model m(x: float32[N,2]) {\n"
                     "    c = false && Activation(x, act_type=\"relu\") == x\n"
                     "    return x + (c ? 1 : 2)\n"
                     "}\n");
    assert_int_equal(fx->g->nnodes, 2);
    /* when it is evaluated, errors and types count */
    assert_contains(eval_error(fx, "(true && 1 / 0 == 0) ? 1 : 2"),
                    "t.sym:4:28: error: integer division by zero\n");
    assert_contains(eval_error(fx, "(1 && true) ? 1 : 2"),
                    "t.sym:4:18: error: an operand of && and || must be a bool, got int\n");
    assert_contains(eval_error(fx, "(true && 1) ? 1 : 2"),
                    "t.sym:4:26: error: an operand of && and || must be a bool, got int\n");
    assert_contains(eval_error(fx, "(false || \"yes\") ? 1 : 2"),
                    "error: an operand of && and || must be a bool, got string\n");
}

static void test_ternary(void **state)
{
    Fx *fx = *state;
    assert_eval(fx, "true ? 1 : 2", 1);
    assert_eval(fx, "false ? 1 : 2", 2);
    assert_eval(fx, "false ? 1 : true ? 2 : 3", 2); /* right associative */
    assert_eval(fx, "false ? 1 : false ? 2 : 3", 3);
    assert_eval(fx, "(1 < 2 ? 10 : 20) + 1", 11);
    assert_eval(fx, "true ? 1.5 : 2", 1.5);
    /* only the chosen branch is evaluated */
    assert_eval(fx, "true ? 1 : 1 / 0", 1);
    assert_eval(fx, "false ? 1 / 0 : 4", 4);
    assert_contains(eval_error(fx, "1 ? 1 : 2"),
                    "t.sym:4:17: error: the condition of '?:' must be a bool, got int\n");
    assert_contains(eval_error(fx, "\"\" ? 1 : 2"),
                    "error: the condition of '?:' must be a bool, got string\n");
}

static void test_if_else_chains(void **state)
{
    Fx *fx = *state;
    static const char defs[] =
        "def signum(n) {\n"
        "    if n < 0 { return -1 } else if n == 0 { return 0 } else if n < 10 { return 1 }\n"
        "    else { return 2 }\n"
        "}\n"
        "def clamp(n) {\n"
        "    r = n\n"
        "    if n > 5 { r = 5 }\n"
        "    if n < 0 { r = 0 } else { r = r * 1 }\n"
        "    return r\n"
        "}";
    assert_num(eval_in(fx, defs, "", "signum(-5)"), -1);
    assert_num(eval_in(fx, defs, "", "signum(0)"), 0);
    assert_num(eval_in(fx, defs, "", "signum(5)"), 1);
    assert_num(eval_in(fx, defs, "", "signum(50)"), 2);
    assert_num(eval_in(fx, defs, "", "clamp(7) * 100 + clamp(-3) * 10 + clamp(2)"), 502);
    /* an if in the model body picks which ops are built */
    must_compile(fx, "model m(x: float32[N,2], deep=true) {\n"
                     "    if deep { x = Activation(x, act_type=\"relu\") } else { x = x * 2 }\n"
                     "    if !deep { x = x * 3 }\n"
                     "    return x\n"
                     "}\n");
    assert_int_equal(fx->g->nnodes, 2);
    assert_non_null(graph_find(fx->g, "act1"));
    assert_contains(eval_error_in(fx, "", "    if 1 { y = 2 }", "0"),
                    "t.sym:3:8: error: an if condition must be a bool, got int\n");
    assert_contains(eval_error_in(fx, "def f(n) { if n > 0 { return 1 } }", "", "f(-1)"),
                    "t.sym:1:1: error: function 'f' ends without a return\n");
}

/* ---- loops and variables ---------------------------------------------------------------- */

static void test_for_loops(void **state)
{
    Fx *fx = *state;
    /* half-open: 1..3 runs for 1 and 2 */
    assert_num(eval_in(fx, "", "    s = 0; n = 0\n    for i in 1..3 { s = s + i; n = n + 1 }",
                             "s * 10 + n"),
                     32);
    /* 3..3 and 5..2 run zero times */
    assert_num(eval_in(fx, "", "    s = 0\n    for i in 3..3 { s = s + 100 }\n"
                                     "    for i in 5..2 { s = s + 1000 }",
                             "s"),
                     0);
    /* negative bounds, and bounds computed once */
    assert_num(eval_in(fx, "", "    s = 0; n = 2\n    for i in -n..n { s = s + 1; n = 10 }",
                             "s"),
                     4);
    /* nested loops */
    assert_num(eval_in(fx, "",
                             "    s = 0\n    for i in 0..3 { for j in 0..4 { s = s + i * j } }", "s"),
                     18);
    /* a loop that builds ops: one Activation per iteration */
    must_compile(fx, "model m(x: float32[N,2]) {\n"
                     "    for i in 0..5 { x = Activation(x, act_type=\"relu\") }\n"
                     "    return x\n"
                     "}\n");
    assert_int_equal(fx->g->nnodes, 6);
    assert_non_null(graph_find(fx->g, "act5"));
    /* a return inside a loop ends the function */
    assert_num(eval_in(fx, "def first_over(n) { for i in 0..100 { if i * i > n { return i } }\n"
                                 "    return -1 }",
                             "", "first_over(50)"),
                     8);
    assert_contains(eval_error_in(fx, "", "    for i in 0..2.5 { y = i }", "0"),
                    "t.sym:3:5: error: the bounds of a for loop must be ints, got int..float\n");
    assert_contains(eval_error_in(fx, "", "    for i in 0..2000000 { y = i }", "0"),
                    "t.sym:3:5: error: loop runs 2000000 times (the limit is 1000000)\n");
    /* the limit is an option */
    ElabOptions opt = {.max_loop_iters = 10};
    assert_null(compile_opts(fx, scalar_src(fx, "", "    for i in 0..11 { y = i }", "0"), &opt));
    assert_contains(last_diag(fx), "error: loop runs 11 times (the limit is 10)\n");
    assert_non_null(compile_opts(fx, scalar_src(fx, "", "    for i in 0..10 { y = i }", "0"), &opt));
}

static void test_variables(void **state)
{
    Fx *fx = *state;
    /* reassignment, of numbers and of tensors */
    assert_num(eval_in(fx, "", "    a = 1\n    a = a + 1\n    a = a * 10", "a"), 20);
    must_compile(fx, "model m(x: float32[N,2]) {\n"
                     "    y = x * 2\n"
                     "    y = y + 1\n"
                     "    y = y * 3\n"
                     "    return y\n"
                     "}\n");
    assert_int_equal(fx->g->nnodes, 4);
    assert_int_equal(fx->g->nodes[fx->g->outputs[0]]->op, OP__mul_scalar);
    /* model parameters with defaults are variables */
    must_compile(fx, "model m(x: float32[N,2], scale=4, name=\"head\") {\n"
                     "    return FullyConnected(x, num_hidden=scale * 2, name=name)\n"
                     "}\n");
    assert_string_equal(shape_of(fx, "head"), "[N,8]");
    /* string concatenation */
    must_compile(fx, "def tag(s, k) = s + \"_\" + \"k\"\n"
                     "model m(x: float32[N,2]) {\n"
                     "    p = \"stem\"\n"
                     "    return FullyConnected(x, num_hidden=3, name=tag(p + \"2\", 1) + \"\")\n"
                     "}\n");
    assert_non_null(graph_find(fx->g, "stem2_k"));
    assert_non_null(graph_find(fx->g, "stem2_k_weight"));
    assert_contains(eval_error(fx, "(\"a\" + 1 == \"a1\") ? 1 : 0"),
                    "error: operator '+' is not defined on string and int\n");
    /* a function sees only its parameters */
    assert_contains(eval_error_in(fx, "def f() = x", "", "f()"),
                    "t.sym:1:11: error: undefined name 'x'\n");
    assert_contains(eval_error_in(fx, "def f() { hidden = 1; return 2 }", "    a = f()", "hidden"),
                    "t.sym:4:17: error: undefined name 'hidden'\n");
}

static void test_undefined_names(void **state)
{
    Fx *fx = *state;
    assert_contains(eval_error_in(fx, "", "    value = 3", "valeu"),
                    "t.sym:4:17: error: undefined name 'valeu' (did you mean 'value'?)\n");
    assert_contains(eval_error_in(fx, "", "    stride = 2", "strde * 2"),
                    "error: undefined name 'strde' (did you mean 'stride'?)\n");
    assert_contains(eval_error_in(fx, "", "    w = 1", "ww"), "error: undefined name 'ww' (did you mean 'w'?)\n");
    /* a one-letter name is not "close" to another one */
    assert_contains(eval_error(fx, "y"), "error: undefined name 'y'\n");
    /* nothing close: no suggestion */
    assert_contains(eval_error_in(fx, "", "    value = 3", "completely_different"),
                    "error: undefined name 'completely_different'\n");
    assert_contains(eval_error_in(fx, "def f(a) = a", "", "f"),
                    "t.sym:4:17: error: 'f' is a function: call it with ()\n");
    assert_contains(eval_error_in(fx, "def myblock(a) = a", "", "myblok(1)"),
                    "error: unknown op or function 'myblok' (did you mean 'myblock'?)\n");
    assert_contains(eval_error(fx, "Activaton(x, act_type=\"relu\")"),
                    "error: unknown op or function 'Activaton' (did you mean 'Activation'?)\n");
}

/* ---- functions -------------------------------------------------------------------------- */

static void test_arguments(void **state)
{
    Fx *fx = *state;
    static const char defs[] = "def f(a, b=10, c=b*2) = a * 10000 + b * 100 + c";
    assert_num(eval_in(fx, defs, "", "f(1)"), 11020);
    assert_num(eval_in(fx, defs, "", "f(1, 2)"), 10204);
    assert_num(eval_in(fx, defs, "", "f(1, 2, 3)"), 10203);
    assert_num(eval_in(fx, defs, "", "f(1, c=5)"), 11005);
    assert_num(eval_in(fx, defs, "", "f(b=1, a=3)"), 30102); /* defaults see earlier params */
    assert_num(eval_in(fx, defs, "", "f(c=7, b=1, a=3)"), 30107);
    /* missing, duplicate, unknown, too many */
    assert_contains(eval_error_in(fx, defs, "", "f(b=1)"),
                    "t.sym:4:17: error: missing argument 'a' in call to 'f'\n");
    assert_contains(eval_error_in(fx, defs, "", "f()"), "error: missing argument 'a' in call to 'f'\n");
    assert_contains(eval_error_in(fx, defs, "", "f(1, a=2)"),
                    "t.sym:4:22: error: argument 'a' given twice in call to 'f'\n");
    assert_contains(eval_error_in(fx, defs, "", "f(1, b=2, b=3)"),
                    "t.sym:4:27: error: argument 'b' given twice\n");
    assert_contains(eval_error_in(fx, defs, "", "f(1, bb=2)"),
                    "t.sym:4:22: error: 'f' has no parameter 'bb' (did you mean 'b'?)\n");
    assert_contains(eval_error_in(fx, defs, "", "f(1, zzzz=2)"),
                    "error: 'f' has no parameter 'zzzz'\n");
    assert_contains(eval_error_in(fx, defs, "", "f(1, 2, 3, 4)"),
                    "t.sym:4:17: error: too many arguments in call to 'f' (it takes 3, got 4)\n");
    assert_contains(eval_error_in(fx, defs, "", "f(a=1, 2)"),
                    "error: positional argument after a named one\n");
    /* definitions */
    assert_contains(eval_error_in(fx, "def f(a) = a\ndef f(b) = b", "", "f(1)"),
                    "t.sym:2:1: error: function 'f' is already defined at t.sym:1:1\n");
    assert_contains(eval_error_in(fx, "def f(a, a) = a", "", "f(1, 2)"),
                    "error: parameter 'a' appears twice\n");
    assert_contains(eval_error_in(fx, "def Convolution(a) = a", "", "1"),
                    "t.sym:1:1: error: 'Convolution' is a built-in op and cannot be redefined\n");
    assert_contains(eval_error_in(fx, "def param(a) = a", "", "1"),
                    "error: 'param' is a built-in op and cannot be redefined\n");
}

static void test_recursion(void **state)
{
    Fx *fx = *state;
    static const char fact[] = "def fact(n) = n <= 1 ? 1 : n * fact(n - 1)";
    assert_true(eval_in(fx, fact, "", "fact(20)") == 2432902008176640000.0);
    assert_contains(eval_error_in(fx, fact, "", "fact(21)"),
                    "t.sym:1:30: error: integer overflow in '*'\n");
    static const char fib[] = "def fib(n) = n < 2 ? n : fib(n - 1) + fib(n - 2)";
    assert_num(eval_in(fx, fib, "", "fib(15)"), 610);
    /* mutual recursion */
    static const char even[] = "def is_even(n) = n == 0 ? true : is_odd(n - 1)\n"
                               "def is_odd(n) = n == 0 ? false : is_even(n - 1)";
    assert_num(eval_in(fx, even, "", "is_even(50) ? 1 : 0"), 1);
    assert_num(eval_in(fx, even, "", "is_odd(7) ? 1 : 0"), 1);
    /* the limit is 100 nested calls: 100 are fine, 101 are not */
    static const char down[] = "def down(n) = n == 0 ? 0 : down(n - 1)";
    assert_num(eval_in(fx, down, "", "down(99)"), 0);
    const char *err = eval_error_in(fx, down, "", "down(100)");
    assert_contains(err, "t.sym:1:28: error: recursion too deep: more than 100 nested calls "
                         "(calling 'down')\n"
                         " def down(n) = n == 0 ? 0 : down(n - 1)\n"
                         "                            ^\n"
                         "note: in call to 'down' from t.sym:1:28\n");
    assert_contains(err, "note: (further calls omitted)\n");
    /* infinite recursion stops at the limit too */
    err = eval_error_in(fx, "def forever(n) = forever(n + 1)", "", "forever(0)");
    assert_contains(err, "error: recursion too deep: more than 100 nested calls (calling 'forever')\n");
    /* the outermost call is the last note before the cut */
    err = eval_error_in(fx, "def a(n) = b(n)\ndef b(n) = 1 / n", "", "a(0)");
    assert_contains(err, "t.sym:2:14: error: integer division by zero\n");
    assert_contains(err, "note: in call to 'b' from t.sym:1:12\nnote: in call to 'a' from t.sym:5:17\n");
    /* the depth is an option */
    ElabOptions opt = {.max_call_depth = 5};
    assert_non_null(compile_opts(fx, scalar_src(fx, down, "", "down(4)"), &opt));
    assert_null(compile_opts(fx, scalar_src(fx, down, "", "down(5)"), &opt));
    assert_contains(last_diag(fx), "error: recursion too deep: more than 5 nested calls (calling 'down')\n");
}

/* Runaway programs are stopped by limits that bite early and say what they
 * are.  A call that made no node and returns a number gives its memory back,
 * so a recursion of 2^n calls costs its live calls' memory, not gigabytes,
 * and the work limit (which counts expressions, not only statements and
 * calls) stops it. */
static void test_runaway_limits(void **state)
{
    Fx *fx = *state;
    static const char twice[] = "def f(n) = n == 0 ? 1 : f(n - 1) + f(n - 1)";
    /* 2^14 calls in 1 MiB: each call's memory is freed when it returns */
    ElabOptions small = {.max_memory = 1 << 20};
    assert_non_null(compile_opts(fx, scalar_src(fx, twice, "", "f(14)"), &small));
    assert_num(node_float(fx->g->nodes[fx->g->outputs[0]], SCALAR_SCALAR), 16384);
    /* the work limit names itself */
    ElabOptions work = {.max_work = 100000};
    assert_null(compile_opts(fx, scalar_src(fx, twice, "", "f(40)"), &work));
    assert_contains(last_diag(fx), "error: elaboration takes more than its limit of 100000 steps "
                                   "(statements, loop iterations, calls, expressions evaluated, "
                                   "nodes made): is a loop too long, or a recursion exponential?\n");
    /* a recursion that makes tensors keeps its nodes: the node limit */
    ElabOptions nodes = {.max_nodes = 100};
    assert_null(compile_opts(fx, "def g(x, n) = n == 0 ? x : g(x, n - 1) + g(x, n - 1)\n"
                                 "model m(x: float32[N,2]) { return g(x, 40) }\n", &nodes));
    assert_contains(last_diag(fx), "error: the model has more than its limit of 100 nodes\n");
    /* strings held in variables: the memory limit, in MiB */
    ElabOptions mem = {.max_memory = 4 << 20};
    assert_null(compile_opts(fx, scalar_src(fx, "", "    s = \"ab\"\n"
                                                   "    for i in 0..18 { s = s + s }\n"
                                                   "    for i in 0..100 { t = s + \"x\" }", "0"),
                             &mem));
    assert_contains(last_diag(fx), "error: elaboration needs more than its limit of 4 MiB (values, "
                                   "names and nodes): is a loop, a recursion or a string too long?\n");
}

/* The probes elaboration's name tables make for a chain of n statements
 * that rotate through a wrapper call, a named op and an unnamed one (as
 * an imported MXNet chain reads, and a hand-written model). */
static int64_t chain_probes(Fx *fx, int n)
{
    size_t cap = (size_t)n * 64 + 256, len = 0;
    char *src = malloc(cap);
    assert_non_null(src);
    len += (size_t)snprintf(src + len, cap - len,
                            "def relu(x) = Activation(x, act_type=\"relu\")\n"
                            "model m(data: float32[N,4]) {\n    x0 = data\n");
    for (int i = 1; i <= n; i++)
        len += (size_t)snprintf(src + len, cap - len,
                                i % 3 == 0 ? "    x%d = relu(x%d)\n"
                                : i % 3 == 1
                                    ? "    x%d = Activation(x%d, act_type=\"relu\", name=\"r%d\")\n"
                                    : "    x%d = Activation(x%d, act_type=\"relu\")\n",
                                i, i - 1, i);
    snprintf(src + len, cap - len, "    return x%d\n}\n", n);
    int64_t probes = 0;
    ElabOptions opt = {.probes = &probes, .max_work = 100 * (int64_t)n};
    Graph *g = frontend_elaborate(&fx->d, "chain.sym", src, strlen(src), &opt);
    assert_non_null(g);
    assert_int_equal(g->nnodes, n + 1);
    graph_free(g);
    free(src);
    return probes;
}

/* Elaboration is linear in the model (issue 21: a chain imported from JSON
 * took 6.7 s at 40k nodes and over a minute at 200k, when each new variable
 * walked the list of all before it).  Counted, not timed: each doubling of
 * the chain may at most double the probes of the name tables (variables,
 * call counters, functions, node names), with room for hash clustering
 * (2.2).  bench/compile_time.sh keeps the times of 200k and 1M. */
static void test_elaboration_linear(void **state)
{
    Fx *fx = *state;
    int64_t p20 = chain_probes(fx, 20000), p40 = chain_probes(fx, 40000),
            p80 = chain_probes(fx, 80000);
    print_message("elaboration probes: 20k %lld, 40k %lld, 80k %lld\n", (long long)p20,
                  (long long)p40, (long long)p80);
    assert_true(p20 >= 20000); /* every statement looks its names up */
    assert_true((double)p40 / (double)p20 <= 2.2);
    assert_true((double)p80 / (double)p40 <= 2.2);
}

/* arena_release frees both runs of blocks made since the mark: new blocks in
 * front of the marked head and large ones put behind it (ASan sees a leak or
 * a double free), and allocation resumes where the mark was. */
static void test_arena_mark_release(void **state)
{
    (void)state;
    Arena a;
    arena_init(&a);
    ArenaMark empty = arena_mark(&a);
    arena_alloc(&a, 100);
    arena_alloc(&a, 100000); /* a large one-off block */
    arena_release(&a, empty);
    assert_null(a.head);
    assert_int_equal(a.total, 0);
    arena_alloc(&a, 32);
    ArenaMark m = arena_mark(&a);
    char *first = arena_alloc(&a, 16);
    arena_alloc(&a, 50000);               /* behind the marked head */
    for (int i = 0; i < 10; i++)
        arena_alloc(&a, 60000 / 4);       /* fills blocks: new heads in front */
    arena_alloc(&a, 70000);               /* behind a new head */
    arena_release(&a, m);
    assert_int_equal(a.total, 32);
    assert_ptr_equal(arena_alloc(&a, 16), first);
    arena_free(&a);
}

/* What a call returns survives the release of its memory: strings and
 * tuples made in the call (their calls keep their memory), tensors; and
 * the call chain of a later error is right although earlier calls' frames
 * were given back. */
static void test_call_memory_release(void **state)
{
    Fx *fx = *state;
    static const char defs[] = "def s(n) = n == 0 ? \"a\" : s(n - 1) + \"b\"\n"
                               "def t(n) = n == 0 ? (n, n + 1) : t(n - 1)\n"
                               "def one(n) = n - n + 1\n"
                               "def inv(n) = 1 / n";
    assert_num(eval_in(fx, defs, "", "s(5) == \"abbbbb\" ? 1 : 0"), 1);
    assert_num(eval_in(fx, defs, "    p = t(3)\n    q = t(4)", "p == (0, 1) && q == p ? 1 : 0"), 1);
    const char *err = eval_error_in(fx, defs, "    a = one(1) + one(2) + one(3)", "inv(one(4) - 1)");
    assert_contains(err, "t.sym:4:16: error: integer division by zero\n");
    assert_contains(err, "note: in call to 'inv' from t.sym:7:17\n");
    assert_false(strstr(err, "'one'"));
}

/* ---- names ------------------------------------------------------------------------------ */

static const char resnet_like[] =
    "def conv(x, c, k=3) = Convolution(x, num_filter=c, kernel=(k,k), pad=((k-1)/2,(k-1)/2),\n"
    "                                  no_bias=true)\n"
    "def bn_relu(x) = Activation(BatchNorm(x), act_type=\"relu\")\n"
    "def block(x, c) {\n"
    "    y = bn_relu(conv(x, c))\n"
    "    y = conv(y, c)\n"
    "    return y + x\n"
    "}\n"
    "def stage(x, c, n) {\n"
    "    for i in 0..n { x = block(x, c) }\n"
    "    return x\n"
    "}\n"
    "model m(data: float32[N,4,8,8], label: float32[N]) {\n"
    "    x = conv(data, 4)\n"
    "    x = stage(x, 4, 2)\n"
    "    x = stage(x, 4, 3)\n"
    "    x = Pooling(x, kernel=(2,2), stride=(2,2))\n"
    "    x = Activation(x, act_type=\"relu\")\n"
    "    return SoftmaxOutput(FullyConnected(x, num_hidden=10), label)\n"
    "}\n";

static void test_hierarchical_names(void **state)
{
    Fx *fx = *state;
    must_compile(fx, resnet_like);
    static const struct {
        const char *name;
        OpKind op;
    } want[] = {
        /* a function making one op names it with its own path */
        {"conv1", OP_Convolution},
        {"conv1_weight", OP_Param},
        {"stage1_block1_conv1", OP_Convolution},
        {"stage1_block1_conv1_weight", OP_Param},
        {"stage1_block1_conv2", OP_Convolution},
        {"stage2_block3_conv2", OP_Convolution},
        /* a function making several: <path>_<prefix><k> */
        {"stage1_block1_bn_relu1_bn1", OP_BatchNorm},
        {"stage1_block1_bn_relu1_act1", OP_Activation},
        {"stage2_block2_bn_relu1_bn1", OP_BatchNorm},
        /* block makes one op (the residual add) but calls others: not a
         * wrapper, so the add is <path>_plus1 in every block */
        {"stage1_block1_plus1", OP_elemwise_add},
        {"stage2_block3_plus1", OP_elemwise_add},
        /* ops of the model body: <prefix><k> */
        {"pool1", OP_Pooling},
        {"act1", OP_Activation},
        {"fc1", OP_FullyConnected},
        {"softmax_output1", OP_SoftmaxOutput},
        /* implicit parameters: <node>_<suffix> */
        {"stage1_block2_bn_relu1_bn1_gamma", OP_Param},
        {"stage1_block2_bn_relu1_bn1_beta", OP_Param},
        {"stage1_block2_bn_relu1_bn1_moving_mean", OP_Param},
        {"stage1_block2_bn_relu1_bn1_moving_var", OP_Param},
        {"fc1_weight", OP_Param},
        {"fc1_bias", OP_Param},
        {"data", OP_Input},
        {"label", OP_Input},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const Node *n = graph_find(fx->g, want[i].name);
        if (!n)
            fail_msg("no node named %s", want[i].name);
        if (n->op != want[i].op)
            fail_msg("%s is a %s", want[i].name, op_info(n->op)->name);
    }
    assert_null(graph_find(fx->g, "stage2_block4_conv1"));
    assert_null(graph_find(fx->g, "conv1_bias")); /* no_bias=true */
    /* parameter kinds follow the slot */
    assert_int_equal(node_param_kind(node(fx, "conv1_weight")), PK_WEIGHT);
    assert_int_equal(node_param_kind(node(fx, "stage1_block2_bn_relu1_bn1_moving_var")), PK_MOVING_VAR);
    assert_int_equal(node_param_kind(node(fx, "fc1_bias")), PK_BIAS);
    /* every node is named, and by graph_set_name */
    for (int i = 0; i < fx->g->nnodes; i++) {
        assert_non_null(fx->g->nodes[i]->name);
        assert_ptr_equal(graph_find(fx->g, fx->g->nodes[i]->name), fx->g->nodes[i]);
    }
    /* 1 + 2 * 2 + 3 * 2 convolutions, each with a weight */
    GraphStats s;
    graph_stats(fx->g, &s);
    assert_int_equal(s.op_count[OP_Convolution], 11);
    assert_int_equal(s.op_count[OP_BatchNorm], 5);
    assert_int_equal(s.op_count[OP_elemwise_add], 5);
}

static void test_counters_shared_by_calls_and_ops(void **state)
{
    Fx *fx = *state;
    /* a direct Convolution and a call of a function named conv in one frame
     * share the counter, so their names cannot clash */
    must_compile(fx, "def conv(x) = Convolution(x, num_filter=2, kernel=(1,1))\n"
                     "def two(x) = Activation(conv(x), act_type=\"relu\")\n"
                     "model m(x: float32[N,2,4,4]) {\n"
                     "    a = Convolution(x, num_filter=2, kernel=(1,1))\n"
                     "    b = conv(a)\n"
                     "    c = two(b)\n"
                     "    d = two(c)\n"
                     "    return Convolution(d, num_filter=2, kernel=(1,1))\n"
                     "}\n");
    /* calls are numbered when made, ops when their frame ends */
    assert_int_equal(node(fx, "conv1")->op, OP_Convolution);
    assert_int_equal(fx->g->nodes[node(fx, "conv1")->in[0]]->op, OP_Convolution);
    assert_int_equal(node(fx, "conv2")->op, OP_Convolution);
    assert_int_equal(node(fx, "conv3")->op, OP_Convolution);
    assert_string_equal(fx->g->nodes[node(fx, "conv2")->in[0]]->name, "x");
    assert_string_equal(fx->g->nodes[node(fx, "conv3")->in[0]]->name, "two2_act1");
    /* two makes one op directly (the Activation) and calls conv once: not a
     * wrapper, so its op is named by prefix */
    assert_int_equal(node(fx, "two1_conv1")->op, OP_Convolution);
    assert_int_equal(node(fx, "two1_act1")->op, OP_Activation);
    assert_null(graph_find(fx->g, "two1"));
    assert_int_equal(node(fx, "two2_conv1")->op, OP_Convolution);
    assert_non_null(graph_find(fx->g, "two2_conv1_weight"));
    assert_non_null(graph_find(fx->g, "two2_conv1_bias"));
    /* scalar ops count as ops of their frame */
    must_compile(fx, "def scale(x) = x * 2 + 1\n"
                     "def one(x) = x * 3\n"
                     "model m(x: float32[N,2]) { return one(scale(x)) - 1 }\n");
    assert_int_equal(node(fx, "scale1_mul_scalar1")->op, OP__mul_scalar);
    assert_int_equal(node(fx, "scale1_plus_scalar1")->op, OP__plus_scalar);
    assert_int_equal(node(fx, "one1")->op, OP__mul_scalar);
    assert_int_equal(node(fx, "minus_scalar1")->op, OP__minus_scalar);
}

static void test_explicit_names(void **state)
{
    Fx *fx = *state;
    must_compile(fx, "def conv(x, nm) = Convolution(x, num_filter=2, kernel=(1,1), name=nm)\n"
                     "def pair(x) = Activation(conv(x, \"inner\"), act_type=\"relu\", name=\"outer\")\n"
                     "model m(x: float32[N,2,4,4]) {\n"
                     "    a = conv(x, \"stem\")\n"
                     "    b = pair(a)\n"
                     "    c = BatchNorm(b, name=\"head\" + \"_bn\")\n"
                     "    return Convolution(c, num_filter=2, kernel=(1,1))\n"
                     "}\n");
    /* name= wins over the frame's path and names the implicit params */
    assert_int_equal(node(fx, "stem")->op, OP_Convolution);
    assert_true(node(fx, "stem")->flags & NF_EXPLICIT_NAME);
    assert_non_null(graph_find(fx->g, "stem_weight"));
    assert_non_null(graph_find(fx->g, "stem_bias"));
    assert_int_equal(node(fx, "inner")->op, OP_Convolution);
    assert_int_equal(node(fx, "outer")->op, OP_Activation);
    assert_non_null(graph_find(fx->g, "head_bn_moving_mean"));
    assert_null(graph_find(fx->g, "conv1"));
    /* the unnamed one still counts from 1 */
    assert_int_equal(node(fx, "conv2")->op, OP_Convolution);
    assert_false(node(fx, "conv2")->flags & NF_EXPLICIT_NAME);
    /* a duplicate explicit name is an error at the second use */
    const char *err = must_fail(fx, "def conv(x) = Convolution(x, num_filter=2, kernel=(1,1), name=\"c\")\n"
                                    "model m(x: float32[N,2,4,4]) {\n"
                                    "    return conv(conv(x))\n"
                                    "}\n");
    assert_contains(err, "t.sym:1:15: error: duplicate name 'c' (already used by Convolution at "
                         "t.sym:1:15)\n");
    assert_contains(err, "note: in call to 'conv' from t.sym:3:12\n");
    /* clashing with an input, or with a generated name */
    assert_contains(must_fail(fx, "model m(x: float32[N,2]) { return FullyConnected(x, num_hidden=2, "
                                  "name=\"x\") }\n"),
                    "t.sym:1:35: error: duplicate name 'x' (already used by Input at t.sym:1:9)\n");
    /* generated names step over the ones the user took */
    must_compile(fx, "model m(x: float32[N,2]) {\n"
                     "    a = FullyConnected(x, num_hidden=2, name=\"fc2\")\n"
                     "    return FullyConnected(FullyConnected(a, num_hidden=2), num_hidden=2)\n"
                     "}\n");
    assert_string_equal(fx->g->nodes[node(fx, "fc1")->in[0]]->name, "fc2");
    assert_string_equal(fx->g->nodes[node(fx, "fc3")->in[0]]->name, "fc1");
    must_compile(fx, "def one(x) = FullyConnected(x, num_hidden=2)\n"
                     "model m(x: float32[N,2]) {\n"
                     "    a = FullyConnected(x, num_hidden=2, name=\"one1\")\n"
                     "    return one(a)\n"
                     "}\n");
    assert_string_equal(fx->g->nodes[node(fx, "one1_fc1")->in[0]]->name, "one1");
    must_compile(fx, "model m(x: float32[N,2]) {\n"
                     "    a = FullyConnected(x, num_hidden=2, name=\"param1\")\n"
                     "    return (a, param(shape=(2,)))\n"
                     "}\n");
    assert_int_equal(node(fx, "param2")->op, OP_Param);
    assert_contains(must_fail(fx, "model m(x: float32[N,2]) { return FullyConnected(x, num_hidden=2, "
                                  "name=\"\") }\n"),
                    "error: name must be a non-empty string\n");
}

static void test_shared_params(void **state)
{
    Fx *fx = *state;
    /* one param() read by two ops is one node, named after its first user */
    must_compile(fx, "model m(x: float32[N,4]) {\n"
                     "    w = param(wd_mult=0.5)\n"
                     "    a = FullyConnected(x, weight=w, num_hidden=4, no_bias=true)\n"
                     "    return FullyConnected(a, weight=w, num_hidden=4, no_bias=true)\n"
                     "}\n");
    const Node *fc1 = node(fx, "fc1"), *fc2 = node(fx, "fc2");
    assert_int_equal(fc1->in[1], fc2->in[1]);
    const Node *w = fx->g->nodes[fc1->in[1]];
    assert_string_equal(w->name, "fc1_weight");
    assert_int_equal(node_param_kind(w), PK_WEIGHT);
    assert_true(node_float(w, PARAM_WD_MULT) == 0.5);
    assert_string_equal(shape_of(fx, "fc1_weight"), "[4,4]");
    int params = 0;
    for (int i = 0; i < fx->g->nnodes; i++)
        params += fx->g->nodes[i]->op == OP_Param;
    assert_int_equal(params, 1);
    /* with a name, through a function */
    must_compile(fx, "def dense(x, w) = FullyConnected(x, weight=w, num_hidden=4)\n"
                     "model m(x: float32[N,4]) {\n"
                     "    w = param(name=\"tied\", init=xavier(magnitude=3))\n"
                     "    return dense(dense(x, w), w)\n"
                     "}\n");
    assert_int_equal(node(fx, "dense1")->in[1], node(fx, "tied")->id);
    assert_int_equal(node(fx, "dense2")->in[1], node(fx, "tied")->id);
    assert_true(node(fx, "tied")->flags & NF_EXPLICIT_NAME);
    assert_string_equal(node(fx, "tied")->attrs[PARAM_INIT].s, "xavier(magnitude=3)");
    assert_non_null(graph_find(fx->g, "dense1_bias"));
    assert_non_null(graph_find(fx->g, "dense2_bias"));
    /* two users that disagree on its shape */
    assert_contains(must_fail(fx, "model m(x: float32[N,4]) {\n"
                                  "    w = param()\n"
                                  "    a = FullyConnected(x, weight=w, num_hidden=4, no_bias=true)\n"
                                  "    return FullyConnected(a, weight=w, num_hidden=5, no_bias=true)\n"
                                  "}\n"),
                    "t.sym:4:12: error: FullyConnected: weight shape [4,4] does not match the "
                    "expected [5,4]\n");
    /* param() argument checking */
    assert_contains(must_fail(fx, "model m(x: float32[N,4]) { return x + FullyConnected(x, "
                                  "num_hidden=4, weight=param(3)) }\n"),
                    "error: param() takes only named arguments (shape, init, wd_mult, lr_mult, name)\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,4]) { return FullyConnected(x, "
                                  "num_hidden=4, weight=param(shape=(4,0))) }\n"),
                    "error: param: shape values must be ints from 1 to 2147483647\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,4]) { return FullyConnected(x, "
                                  "num_hidden=4, weight=param(wd_mult=-1)) }\n"),
                    "error: Param: attribute 'wd_mult' must be between 0 and 1e+30, got -1\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,4]) { return FullyConnected(x, "
                                  "num_hidden=4, weight=param(lr=1)) }\n"),
                    "error: param() has no argument 'lr' (it takes shape, init, wd_mult, lr_mult, "
                    "name)\n");
}

static void test_model_selection(void **state)
{
    Fx *fx = *state;
    static const char two[] = "model a(x: float32[N,2]) { return x * 2 }\n"
                              "model b(x: float32[N,2]) { return x * 3 }\n";
    must_compile(fx, two);
    assert_string_equal(fx->g->model, "a"); /* the first by default */
    ElabOptions opt = {.model = "b"};
    assert_non_null(compile_opts(fx, two, &opt));
    assert_string_equal(fx->g->model, "b");
    opt.model = "c";
    assert_null(compile_opts(fx, two, &opt));
    assert_contains(last_diag(fx), "ampc: error: no model named 'c'\n");
    assert_contains(must_fail(fx, "def f(x) = x\n"), "t.sym:1:1: error: no model defined in 't.sym'\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,2]) { y = x }\n"),
                    "t.sym:1:1: error: model 'm' ends without a return\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,2]) { return 3 }\n"),
                    "t.sym:1:1: error: model 'm' must return a tensor or a tuple of tensors, got int\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,2]) { return (x, 1) }\n"),
                    "error: model 'm' must return tensors, got a int in its tuple\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,2], x: float32[N,2]) { return x }\n"),
                    "error: model parameter 'x' appears twice\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,0]) { return x }\n"),
                    "error: dimension 0 of input 'x' must be between 1 and 2147483647\n");
    assert_contains(must_fail(fx, "model m(x: float99[N,2]) { return x }\n"),
                    "error: unknown dtype 'float99' for input 'x' (the dtypes: float16, bfloat16, "
                    "float32, float64, int8, uint8, int32, int64)\n");
    /* several outputs */
    must_compile(fx, "model m(x: float32[N,2]) { return (x * 2, Activation(x, act_type=\"tanh\")) }\n");
    assert_int_equal(fx->g->noutputs, 2);
    assert_true(fx->g->nodes[fx->g->outputs[1]]->flags & NF_OUTPUT);
}

static void test_train_block(void **state)
{
    Fx *fx = *state;
    must_compile(fx, "model m(x: float32[N,2]) { return x * 2 }\n"
                     "train m {\n"
                     "    batch_size = 16 * 4; lr = 0.1; epochs = 3\n"
                     "    optimizer = sgd(momentum=0.9, wd=1e-4)\n"
                     "    data = digits; amp = off\n"
                     "}\n");
    assert_int_equal(fx->g->ntrain, 6);
    assert_string_equal(fx->g->train[0].key, "batch_size");
    assert_int_equal(fx->g->train[0].val->kind, CV_INT);
    assert_int_equal(fx->g->train[0].val->i, 64); /* expressions are evaluated */
    assert_int_equal(fx->g->train[1].val->kind, CV_FLOAT);
    assert_int_equal(fx->g->train[3].val->kind, CV_CALL);
    assert_string_equal(fx->g->train[3].val->s, "sgd");
    assert_int_equal(fx->g->train[3].val->nargs, 2);
    assert_string_equal(fx->g->train[3].val->argnames[0], "momentum");
    assert_int_equal(fx->g->train[4].val->kind, CV_SYM);
    assert_string_equal(fx->g->train[4].val->s, "digits");
    assert_contains(must_fail(fx, "model m(x: float32[N,2]) { return x }\ntrain m { bach_size = 3 }\n"),
                    "t.sym:2:11: error: unknown train setting 'bach_size' (did you mean 'batch_size'?)\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,2]) { return x }\ntrain m { lr = 1; lr = 2 }\n"),
                    "error: train setting 'lr' given twice\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,2]) { return x }\ntrain q { lr = 1 }\n"),
                    "t.sym:2:1: error: train block for unknown model 'q'\n");
}

/* ---- infer-types ---------------------------------------------------------------------------- */

static const char manual_fp16[] =
    "def cbr(x, c) = Activation(BatchNorm(Convolution(x, num_filter=c, kernel=(3,3), pad=(1,1),\n"
    "                                                 no_bias=true)), act_type=\"relu\")\n"
    "model m(data: float32[N,3,8,8], label: float32[N]) {\n"
    "    x = Cast(data, float16)\n"
    "    x = cbr(cbr(x, 8), 8)\n"
    "    x = Pooling(x, global_pool=true, pool_type=\"avg\")\n"
    "    x = FullyConnected(Flatten(x), num_hidden=10)\n"
    "    return SoftmaxOutput(Cast(x, float32), label)\n"
    "}\n";

static void test_infer_types_manual_fp16(void **state)
{
    Fx *fx = *state;
    must_compile(fx, manual_fp16);
    static const struct {
        const char *name;
        DType dt;
    } want[] = {
        {"data", DT_F32},
        {"cast1", DT_F16},
        /* compute ops run in the dtype of their data, and so do their weights */
        {"cbr1_conv1", DT_F16},
        {"cbr1_conv1_weight", DT_F16},
        {"cbr2_conv1_weight", DT_F16},
        {"fc1_weight", DT_F16},
        {"fc1_bias", DT_F16},
        {"fc1", DT_F16},
        /* BatchNorm: fp16 data, fp32 gamma, beta and moving statistics */
        {"cbr1_bn1", DT_F16},
        {"cbr1_bn1_gamma", DT_F32},
        {"cbr1_bn1_beta", DT_F32},
        {"cbr1_bn1_moving_mean", DT_F32},
        {"cbr1_bn1_moving_var", DT_F32},
        {"cbr2_bn1_moving_var", DT_F32},
        {"cbr2_act1", DT_F16},
        {"pool1", DT_F16},
        {"flatten1", DT_F16},
        {"cast2", DT_F32},
        /* labels keep their declared dtype */
        {"label", DT_F32},
        {"softmax_output1", DT_F32},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        DType got = node(fx, want[i].name)->dtype;
        if (got != want[i].dt)
            fail_msg("%s is %s, expected %s", want[i].name, dtype_long(got), dtype_long(want[i].dt));
    }
    /* nothing is left untyped */
    for (int i = 0; i < fx->g->nnodes; i++)
        assert_int_not_equal(fx->g->nodes[i]->dtype, DT_UNKNOWN);
    /* an fp16 SoftmaxOutput still has an fp32 (or any) label */
    must_compile(fx, "model m(x: float32[N,10], l: int32[N]) {\n"
                     "    return SoftmaxOutput(Cast(x, float16), l)\n"
                     "}\n");
    assert_int_equal(node(fx, "softmax_output1")->dtype, DT_F16);
    assert_int_equal(node(fx, "l")->dtype, DT_I32);
}

static void test_infer_types_errors(void **state)
{
    Fx *fx = *state;
    /* mixed float dtypes meeting in one op: AMP's job, an error without it */
    assert_contains(must_fail(fx, "model m(x: float32[N,4]) {\n"
                                  "    return Cast(x, float16) + x\n"
                                  "}\n"),
                    "t.sym:2:29: error: dtype mismatch in elemwise_add: float16 vs float32 (insert "
                    "a Cast, or compile with --amp)\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,4], y: float16[N,4]) {\n"
                                  "    return Concat(x, y)\n"
                                  "}\n"),
                    "error: dtype mismatch in Concat: float32 vs float16 (insert a Cast, or compile "
                    "with --amp)\n");
    assert_contains(must_fail(fx, "model m(x: float32[N,4], y: bfloat16[4]) {\n"
                                  "    return broadcast_mul(x, y)\n"
                                  "}\n"),
                    "error: dtype mismatch in broadcast_mul: float32 vs bfloat16");
    /* one parameter read at two dtypes */
    assert_contains(must_fail(fx, "model m(x: float32[N,4]) {\n"
                                  "    w = param(name=\"w\")\n"
                                  "    a = FullyConnected(Cast(x, float16), weight=w, num_hidden=4)\n"
                                  "    return FullyConnected(x, weight=w, num_hidden=4) + Cast(a, float32)\n"
                                  "}\n"),
                    "t.sym:4:12: error: FullyConnected: input 'weight' ('w') is float16 but must be "
                    "float32 here\n");
    /* BatchNorm's parameters must be fp32 even when given */
    assert_contains(must_fail(fx, "model m(x: float32[N,4]) {\n"
                                  "    return BatchNorm(Cast(x, float16), gamma=Cast(param(shape=(4,)), "
                                  "float16))\n"
                                  "}\n"),
                    "error: BatchNorm: input 'gamma' ('cast2') is float16 but must be float32 here\n");
    /* integer data */
    assert_contains(must_fail(fx, "model m(x: int32[N,4]) {\n"
                                  "    return FullyConnected(x, num_hidden=2)\n"
                                  "}\n"),
                    "t.sym:2:12: error: FullyConnected needs floating-point data, got int32\n");
    assert_contains(must_fail(fx, "model m(x: uint8[N,4]) { return x * 2 }\n"),
                    "error: _mul_scalar needs floating-point data, got uint8\n");
    /* a Cast makes integer input usable */
    must_compile(fx, "model m(x: uint8[N,4]) { return Cast(x, float32) / 255 }\n");
    assert_int_equal(fx->g->nodes[fx->g->outputs[0]]->dtype, DT_F32);
    /* parameters read as data take the dtype of the other data */
    must_compile(fx, "model m(x: float16[N,4]) { return broadcast_add(x, param(shape=(4,))) }\n");
    assert_int_equal(node(fx, "broadcast_add1_rhs")->dtype, DT_F16);
    assert_int_equal(node(fx, "broadcast_add1")->dtype, DT_F16);
    must_compile(fx, "model m(x: float16[N,4]) { return (x, exp(param(shape=(4,)))) }\n");
    assert_int_equal(node(fx, "exp1_data")->dtype, DT_F32);
}

/* ---- graph_stats ------------------------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s (run the tests from the repository root)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void test_graph_stats_resnet50(void **state)
{
    Fx *fx = *state;
    size_t len;
    char *text = read_file("examples/resnet50_v1d.sym", &len);
    fx->off = strlen(diag_text(fx));
    fx->g = frontend_elaborate(&fx->d, "examples/resnet50_v1d.sym", text, len, NULL);
    free(text);
    if (!fx->g || !infer_shapes(fx->g) || !infer_types(fx->g))
        fail_msg("%s", last_diag(fx));
    GraphStats s;
    graph_stats(fx->g, &s);
    assert_int_equal(s.op_count[OP_Convolution], 55);
    assert_int_equal(s.op_count[OP_BatchNorm], 55);
    assert_int_equal(s.op_count[OP_FullyConnected], 1);
    assert_int_equal(s.op_count[OP_Pooling], 5);
    assert_int_equal(s.op_count[OP_elemwise_add], 16);
    assert_int_equal(s.op_count[OP_SoftmaxOutput], 1);
    assert_int_equal(s.op_count[OP_Input], 2);
    assert_int_equal(s.trainable, 25576264);
    assert_int_equal(s.trainable_tensors, 167);
    assert_int_equal(s.aux, 53248);
    assert_int_equal(s.aux_tensors, 110);
    assert_int_equal(s.op_count[OP_Param], 167 + 110);
    assert_int_equal(s.param_bytes, (25576264 + 53248) * 4); /* all fp32 */
    assert_int_equal(fx->g->noutputs, 1);
    const Node *out = fx->g->nodes[fx->g->outputs[0]];
    char b[64];
    assert_string_equal(shape_str(&out->shape, b, sizeof b), "[N,1000]");
    assert_int_equal(out->op, OP_SoftmaxOutput);
    assert_int_equal(out->dtype, DT_F32);
    /* about 4.1 G multiply-adds per image */
    assert_true(s.flops > 8.0e9 && s.flops < 9.0e9);
    /* spot checks of the v1d structure */
    assert_string_equal(shape_of(fx, "conv1_weight"), "[32,3,3,3]");
    assert_string_equal(shape_of(fx, "fc1_weight"), "[1000,2048]");
    assert_true(node_float(node(fx, "fc1_bias"), PARAM_WD_MULT) == 0);
    assert_string_equal(shape_of(fx, "stage4_block3_plus1"), "[N,2048,7,7]");
}

static void test_graph_stats_small(void **state)
{
    Fx *fx = *state;
    must_compile(fx, "model m(x: float32[N,8], l: float32[N]) {\n"
                     "    h = FullyConnected(x, num_hidden=4)\n"
                     "    h = BatchNorm(Cast(h, float16))\n"
                     "    return SoftmaxOutput(Cast(FullyConnected(h, num_hidden=3, no_bias=true), "
                     "float32), l)\n"
                     "}\n");
    GraphStats s;
    graph_stats(fx->g, &s);
    /* fc1 36 (fp32), gamma+beta 8 (fp32), fc2 weight 12 (fp16) */
    assert_int_equal(s.trainable, 36 + 8 + 12);
    assert_int_equal(s.trainable_tensors, 5);
    assert_int_equal(s.aux, 8);
    assert_int_equal(s.aux_tensors, 2);
    assert_int_equal(s.param_bytes, 36 * 4 + 8 * 4 + 12 * 2 + 8 * 4);
    /* forward FLOPs per sample: 2*8*4 + 4 (fc1), 4*4 (bn), 2*4*3 (fc2), 5*3 (softmax) */
    assert_true(s.flops == 2 * 8 * 4 + 4 + 4 * 4 + 2 * 4 * 3 + 5 * 3);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_int_arithmetic),
        T(test_float_arithmetic),
        T(test_arithmetic_errors),
        T(test_comparisons_and_logic),
        T(test_short_circuit),
        T(test_ternary),
        T(test_if_else_chains),
        T(test_for_loops),
        T(test_variables),
        T(test_undefined_names),
        T(test_arguments),
        T(test_recursion),
        T(test_hierarchical_names),
        T(test_counters_shared_by_calls_and_ops),
        T(test_explicit_names),
        T(test_shared_params),
        T(test_model_selection),
        T(test_train_block),
        T(test_infer_types_manual_fp16),
        T(test_infer_types_errors),
        T(test_graph_stats_resnet50),
        T(test_graph_stats_small),
        T(test_runaway_limits),
        T(test_elaboration_linear),
        T(test_call_memory_release),
        T(test_arena_mark_release),
    };
#undef T
    return cmocka_run_group_tests_name("passes", tests, NULL, NULL);
}
