/* test_grammar.c - the front end: tokens, the grammar, the error messages of
 * the lexer and the parser, the nesting limit and the import loader. */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700
#endif

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ast.h"

/* ---- fixture -------------------------------------------------------------- */

typedef struct {
    Arena arena;
    Diag diag;
    FILE *out;    /* diagnostics */
    char *buf;
    size_t len;
    AstList decls;
    char *dump;   /* last dump (malloc'ed) */
} Fx;

static int setup(void **state)
{
    Fx *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    fx->out = open_memstream(&fx->buf, &fx->len);
    assert_non_null(fx->out);
    arena_init(&fx->arena);
    diag_init(&fx->diag, fx->out);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    Fx *fx = *state;
    diag_free(&fx->diag);
    arena_free(&fx->arena);
    fclose(fx->out);
    free(fx->buf);
    free(fx->dump);
    free(fx);
    return 0;
}

/* Parses src (len bytes, or strlen) as the file "t.sym". */
static bool parse_n(Fx *fx, const char *src, size_t len)
{
    int f = diag_add_buffer(&fx->diag, "t.sym", src, len);
    return ast_parse(&fx->arena, &fx->diag, f, &fx->decls);
}

static bool parse(Fx *fx, const char *src) { return parse_n(fx, src, strlen(src)); }

static const char *errors(Fx *fx)
{
    fflush(fx->out);
    return fx->buf ? fx->buf : "";
}

static const char *dump_list(Fx *fx, const AstList *l)
{
    free(fx->dump);
    size_t n;
    FILE *f = open_memstream(&fx->dump, &n);
    assert_non_null(f);
    for (int i = 0; i < l->n; i++)
        ast_dump(f, l->items[i], 0);
    fclose(f);
    return fx->dump;
}

/* Parses src, which must be fine, and returns the dump of its decls. */
static const char *dump_of(Fx *fx, const char *src)
{
    bool ok = parse(fx, src);
    if (!ok)
        fprintf(stderr, "unexpected errors:\n%s", errors(fx));
    assert_true(ok);
    assert_string_equal(errors(fx), "");
    return dump_list(fx, &fx->decls);
}

/* Parses "def f() = <expr>" and returns the dump of the expression alone. */
static const char *expr_dump(Fx *fx, const char *expr)
{
    size_t n = strlen(expr) + 16;
    char *src = malloc(n);
    assert_non_null(src);
    snprintf(src, n, "def f() = %s", expr);
    bool ok = parse(fx, src);
    free(src);
    if (!ok)
        fprintf(stderr, "unexpected errors:\n%s", errors(fx));
    assert_true(ok);
    assert_int_equal(fx->decls.n, 1);
    AstList one = {&fx->decls.items[0]->a, 1};
    return dump_list(fx, &one);
}

/* src must fail with exactly one error whose first line is
 * "t.sym:" + msg. */
static void expect_error_n(Fx *fx, const char *src, size_t len, const char *msg)
{
    assert_false(parse_n(fx, src, len));
    assert_int_equal(fx->decls.n, 0);
    assert_int_equal(fx->diag.nerr, 1);
    const char *out = errors(fx);
    const char *nl = strchr(out, '\n');
    assert_non_null(nl);
    char *first = strndup(out, (size_t)(nl - out));
    char want[512];
    snprintf(want, sizeof want, "t.sym:%s", msg);
    if (strcmp(first, want) != 0)
        fprintf(stderr, "got:  %s\nwant: %s\n", first, want);
    assert_string_equal(first, want);
    free(first);
}

static void expect_error(Fx *fx, const char *src, const char *msg)
{
    expect_error_n(fx, src, strlen(src), msg);
}

/* ---- tokens and literals -------------------------------------------------- */

static void test_literals(void **state)
{
    Fx *fx = *state;
    assert_string_equal(
        expr_dump(fx, "(0, 42, 9223372036854775807, 1.5, 1e-5, 2.5e3, .5, 7E+2, true, false, x_1)"),
        "tuple 11\n"
        "  int 0\n"
        "  int 42\n"
        "  int 9223372036854775807\n"
        "  float 1.5\n"
        "  float 1e-05\n"
        "  float 2500.0\n"
        "  float 0.5\n"
        "  float 700.0\n"
        "  bool true\n"
        "  bool false\n"
        "  ident x_1\n");
    AstNode *t = fx->decls.items[0]->a;
    assert_int_equal(t->list.items[2]->ival, INT64_MAX);
    assert_true(t->list.items[4]->fval == 1e-5);
    assert_true(t->list.items[6]->fval == 0.5);
}

static void test_strings(void **state)
{
    Fx *fx = *state;
    assert_string_equal(expr_dump(fx, "\"a\\\"b\\\\c\\nd\\te\""), "str \"a\\\"b\\\\c\\nd\\te\"\n");
    const char *s = fx->decls.items[0]->a->str;
    assert_string_equal(s, "a\"b\\c\nd\te");
    assert_string_equal(expr_dump(fx, "\"\""), "str \"\"\n");
    assert_string_equal(fx->decls.items[0]->a->str, "");
    assert_string_equal(expr_dump(fx, "\"# not a comment\""), "str \"# not a comment\"\n");
}

static void test_range_lexing(void **state)
{
    Fx *fx = *state;
    assert_string_equal(dump_of(fx, "def f() { for i in 1..3 { } for j in 0 .. n+1 { } }"),
                         "def f\n"
                         "  block\n"
                         "    for i\n"
                         "      int 1\n"
                         "      int 3\n"
                         "      block\n"
                         "    for j\n"
                         "      int 0\n"
                         "      binary +\n"
                         "        ident n\n"
                         "        int 1\n"
                         "      block\n");
}

static void test_keywords_are_reserved(void **state)
{
    Fx *fx = *state;
    /* keywords as prefixes of identifiers are identifiers */
    assert_string_equal(expr_dump(fx, "(define, iff, format, truer, in_x, returns)"),
                        "tuple 6\n  ident define\n  ident iff\n  ident format\n"
                        "  ident truer\n  ident in_x\n  ident returns\n");
    expect_error(fx, "def if() = 1",
                 "1:5: error: syntax error, unexpected 'if', expecting identifier");
}

static void test_comments_and_semicolons(void **state)
{
    Fx *fx = *state;
    assert_string_equal(dump_of(fx, "# leading comment\n"
                                    "def f(x) {   # after a brace\n"
                                    "  ;; a = x; b = a # trailing\n"
                                    "  return b;\n"
                                    "};\n"
                                    "# last line without newline"),
                        "def f\n"
                        "  param x\n"
                        "  block\n"
                        "    assign a\n"
                        "      ident x\n"
                        "    assign b\n"
                        "      ident a\n"
                        "    return\n"
                        "      ident b\n");
    assert_int_equal(fx->decls.n, 1);
}

static void test_empty_file(void **state)
{
    Fx *fx = *state;
    assert_string_equal(dump_of(fx, ""), "");
    assert_int_equal(fx->decls.n, 0);
    assert_string_equal(dump_of(fx, "  # only a comment\n\n"), "");
}

/* ---- expressions ---------------------------------------------------------- */

static void test_precedence(void **state)
{
    Fx *fx = *state;
    assert_string_equal(expr_dump(fx, "a || b && c == d < e + f * -g"),
                        "binary ||\n"
                        "  ident a\n"
                        "  binary &&\n"
                        "    ident b\n"
                        "    binary ==\n"
                        "      ident c\n"
                        "      binary <\n"
                        "        ident d\n"
                        "        binary +\n"
                        "          ident e\n"
                        "          binary *\n"
                        "            ident f\n"
                        "            unary -\n"
                        "              ident g\n");
    assert_string_equal(expr_dump(fx, "-a * b % c / d"),
                        "binary /\n"
                        "  binary %\n"
                        "    binary *\n"
                        "      unary -\n"
                        "        ident a\n"
                        "      ident b\n"
                        "    ident c\n"
                        "  ident d\n");
    assert_string_equal(expr_dump(fx, "!a == b != c"),
                        "binary !=\n"
                        "  binary ==\n"
                        "    unary !\n"
                        "      ident a\n"
                        "    ident b\n"
                        "  ident c\n");
    assert_string_equal(expr_dump(fx, "a <= b >= c > d"),
                        "binary >\n"
                        "  binary >=\n"
                        "    binary <=\n"
                        "      ident a\n"
                        "      ident b\n"
                        "    ident c\n"
                        "  ident d\n");
    assert_string_equal(expr_dump(fx, "(a + b) * c"),
                        "binary *\n"
                        "  binary +\n"
                        "    ident a\n"
                        "    ident b\n"
                        "  ident c\n");
    assert_string_equal(expr_dump(fx, "a and b or not_ok"),
                        "binary ||\n"
                        "  binary &&\n"
                        "    ident a\n"
                        "    ident b\n"
                        "  ident not_ok\n");
    assert_string_equal(expr_dump(fx, "- - x"), "unary -\n  unary -\n    ident x\n");
}

static void test_associativity(void **state)
{
    Fx *fx = *state;
    assert_string_equal(expr_dump(fx, "a - b - c"),
                        "binary -\n  binary -\n    ident a\n    ident b\n  ident c\n");
    assert_string_equal(expr_dump(fx, "a ? b : c ? d : e"),
                        "cond\n  ident a\n  ident b\n  cond\n    ident c\n    ident d\n    ident e\n");
    assert_string_equal(expr_dump(fx, "a || b ? c + 1 : d ? e : f"),
                        "cond\n"
                        "  binary ||\n"
                        "    ident a\n"
                        "    ident b\n"
                        "  binary +\n"
                        "    ident c\n"
                        "    int 1\n"
                        "  cond\n"
                        "    ident d\n"
                        "    ident e\n"
                        "    ident f\n");
    assert_string_equal(expr_dump(fx, "a ? b ? c : d : e"),
                        "cond\n  ident a\n  cond\n    ident b\n    ident c\n    ident d\n  ident e\n");
}

static void test_tuples(void **state)
{
    Fx *fx = *state;
    assert_string_equal(expr_dump(fx, "()"), "tuple 0\n");
    assert_string_equal(expr_dump(fx, "(a,)"), "tuple 1\n  ident a\n");
    assert_string_equal(expr_dump(fx, "(a)"), "ident a\n");
    assert_string_equal(expr_dump(fx, "((a))"), "ident a\n");
    assert_string_equal(expr_dump(fx, "(a, 2)"), "tuple 2\n  ident a\n  int 2\n");
    assert_string_equal(expr_dump(fx, "(a, 2,)"), "tuple 2\n  ident a\n  int 2\n");
    assert_string_equal(expr_dump(fx, "((1,2),(),(3,))"),
                        "tuple 3\n"
                        "  tuple 2\n"
                        "    int 1\n"
                        "    int 2\n"
                        "  tuple 0\n"
                        "  tuple 1\n"
                        "    int 3\n");
}

static void test_calls_and_named_args(void **state)
{
    Fx *fx = *state;
    assert_string_equal(expr_dump(fx, "f(x, n=1, g(y), k=(1,1),)"),
                        "call f\n"
                        "  arg\n"
                        "    ident x\n"
                        "  arg n\n"
                        "    int 1\n"
                        "  arg\n"
                        "    call g\n"
                        "      arg\n"
                        "        ident y\n"
                        "  arg k\n"
                        "    tuple 2\n"
                        "      int 1\n"
                        "      int 1\n");
    assert_string_equal(expr_dump(fx, "f()"), "call f\n");
    assert_string_equal(expr_dump(fx, "f(a == b)"),
                        "call f\n  arg\n    binary ==\n      ident a\n      ident b\n");
}

static void test_many_items(void **state)
{
    Fx *fx = *state;
    /* long flat lists grow in the arena; order is kept */
    enum { N = 5000 };
    char *src = malloc(N * 8 + 64);
    char *p = src + sprintf(src, "def f() = g(");
    for (int i = 0; i < N; i++)
        p += sprintf(p, "%d,", i);
    strcpy(p, ")");
    assert_true(parse(fx, src));
    free(src);
    const AstNode *call = fx->decls.items[0]->a;
    assert_int_equal(call->list.n, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(call->list.items[i]->a->ival, i);
    assert_int_equal(call->depth, 2); /* an argument is no level of its own */
}

/* ---- declarations and statements ----------------------------------------- */

static void test_def_bodies_and_defaults(void **state)
{
    Fx *fx = *state;
    assert_string_equal(dump_of(fx, "def f(x, k=1, s=(2,2),) = x * k\n"
                                    "def g() { return 1 }\n"
                                    "def h(a) = a\n"),
                        "def f\n"
                        "  param x\n"
                        "  param k\n"
                        "    int 1\n"
                        "  param s\n"
                        "    tuple 2\n"
                        "      int 2\n"
                        "      int 2\n"
                        "  binary *\n"
                        "    ident x\n"
                        "    ident k\n"
                        "def g\n"
                        "  block\n"
                        "    return\n"
                        "      int 1\n"
                        "def h\n"
                        "  param a\n"
                        "  ident a\n");
    const AstNode *f = fx->decls.items[0], *g = fx->decls.items[1];
    assert_int_equal(f->kind, AST_DEF);
    assert_non_null(f->a);
    assert_null(f->b);
    assert_int_equal(f->params.n, 3);
    assert_null(f->params.items[0]->a);
    assert_null(g->a);
    assert_non_null(g->b);
    assert_int_equal(g->b->kind, AST_BLOCK);
    assert_int_equal(g->params.n, 0);
}

static void test_model_typed_inputs(void **state)
{
    Fx *fx = *state;
    assert_string_equal(
        dump_of(fx, "model m(data: float32[N,3,224,224], label: int32[N], classes=10) {\n"
                    "  return data\n}\n"),
        "model m\n"
        "  param data: float32[N,3,224,224]\n"
        "  param label: int32[N]\n"
        "  param classes\n"
        "    int 10\n"
        "  block\n"
        "    return\n"
        "      ident data\n");
    const AstNode *m = fx->decls.items[0];
    assert_int_equal(m->kind, AST_MODEL);
    const AstNode *data = m->params.items[0];
    assert_string_equal(data->dtype, "float32");
    assert_int_equal(data->list.n, 4);
    assert_int_equal(data->list.items[0]->kind, AST_IDENT);
    assert_string_equal(data->list.items[0]->str, "N");
    assert_int_equal(data->list.items[1]->kind, AST_INT);
    assert_int_equal(data->list.items[3]->ival, 224);
    assert_null(m->params.items[2]->dtype);
    assert_string_equal(dump_of(fx, "model e() {}"), "model e\n  block\n");
}

static void test_train_block(void **state)
{
    Fx *fx = *state;
    assert_string_equal(dump_of(fx, "train m {\n"
                                    "  batch_size = 512; epochs = 120\n"
                                    "  optimizer = nag(momentum=0.9, wd=1e-4)\n"
                                    "  amp = float16   # bfloat16 | off\n"
                                    "  data = cifar10(\"dir\");\n"
                                    "}"),
                        "train m\n"
                        "  assign batch_size\n"
                        "    int 512\n"
                        "  assign epochs\n"
                        "    int 120\n"
                        "  assign optimizer\n"
                        "    call nag\n"
                        "      arg momentum\n"
                        "        float 0.9\n"
                        "      arg wd\n"
                        "        float 0.0001\n"
                        "  assign amp\n"
                        "    ident float16\n"
                        "  assign data\n"
                        "    call cifar10\n"
                        "      arg\n"
                        "        str \"dir\"\n");
    assert_string_equal(dump_of(fx, "train m {}"), "train m\n");
}

static void test_if_else_chain(void **state)
{
    Fx *fx = *state;
    assert_string_equal(dump_of(fx, "def f(x) {\n"
                                    "  if x < 0 { y = 0 } else if x < 10 { y = 1 }\n"
                                    "  else if x { } else { y = 2 }\n"
                                    "  if x { }\n"
                                    "}"),
                        "def f\n"
                        "  param x\n"
                        "  block\n"
                        "    if\n"
                        "      binary <\n"
                        "        ident x\n"
                        "        int 0\n"
                        "      block\n"
                        "        assign y\n"
                        "          int 0\n"
                        "      if\n"
                        "        binary <\n"
                        "          ident x\n"
                        "          int 10\n"
                        "        block\n"
                        "          assign y\n"
                        "            int 1\n"
                        "        if\n"
                        "          ident x\n"
                        "          block\n"
                        "          block\n"
                        "            assign y\n"
                        "              int 2\n"
                        "    if\n"
                        "      ident x\n"
                        "      block\n");
    const AstNode *chain = fx->decls.items[0]->b->list.items[0];
    assert_int_equal(chain->kind, AST_IF);
    assert_int_equal(chain->c->kind, AST_IF);
    assert_int_equal(chain->c->c->kind, AST_IF);
    assert_int_equal(chain->c->c->c->kind, AST_BLOCK);
    assert_null(fx->decls.items[0]->b->list.items[1]->c);
}

static void test_for_and_return(void **state)
{
    Fx *fx = *state;
    assert_string_equal(dump_of(fx, "def f(x, n) {\n"
                                    "  for i in 0..n { for j in i .. 2*n { x = g(x, i, j) } }\n"
                                    "  return -x\n"
                                    "}"),
                        "def f\n"
                        "  param x\n"
                        "  param n\n"
                        "  block\n"
                        "    for i\n"
                        "      int 0\n"
                        "      ident n\n"
                        "      block\n"
                        "        for j\n"
                        "          ident i\n"
                        "          binary *\n"
                        "            int 2\n"
                        "            ident n\n"
                        "          block\n"
                        "            assign x\n"
                        "              call g\n"
                        "                arg\n"
                        "                  ident x\n"
                        "                arg\n"
                        "                  ident i\n"
                        "                arg\n"
                        "                  ident j\n"
                        "    return\n"
                        "      unary -\n"
                        "        ident x\n");
}

static void test_statements_across_lines(void **state)
{
    Fx *fx = *state;
    /* newlines are whitespace: an expression may span lines, and a new
     * statement starts at the next identifier or keyword */
    assert_string_equal(dump_of(fx, "def f(a) {\n"
                                    "  x = a +\n"
                                    "      1 y = x\n"
                                    "  z = g(\n"
                                    "    y)\n"
                                    "}"),
                        "def f\n"
                        "  param a\n"
                        "  block\n"
                        "    assign x\n"
                        "      binary +\n"
                        "        ident a\n"
                        "        int 1\n"
                        "    assign y\n"
                        "      ident x\n"
                        "    assign z\n"
                        "      call g\n"
                        "        arg\n"
                        "          ident y\n");
}

static void test_import_decl(void **state)
{
    Fx *fx = *state;
    assert_string_equal(dump_of(fx, "import \"lib/a.sym\"\ndef f() = 1"),
                        "import \"lib/a.sym\"\ndef f\n  int 1\n");
}

static void test_locations(void **state)
{
    Fx *fx = *state;
    assert_true(parse(fx, "def f(x) {\n"
                          "\ty = x +  2\n"
                          "  if y { return g(k=y) }\n"
                          "}\n"));
    const AstNode *def = fx->decls.items[0];
    assert_int_equal(def->loc.line, 1);
    assert_int_equal(def->loc.col, 1);
    assert_int_equal(def->loc.file, 0);
    assert_int_equal(def->params.items[0]->loc.col, 7);
    const AstNode *blk = def->b;
    assert_int_equal(blk->loc.col, 10);
    const AstNode *asg = blk->list.items[0];
    assert_int_equal(asg->loc.line, 2);
    assert_int_equal(asg->loc.col, 2); /* a tab is one byte */
    const AstNode *plus = asg->a;
    assert_int_equal(plus->kind, AST_BINARY);
    assert_int_equal(plus->loc.col, 8); /* the operator */
    assert_int_equal(plus->b->loc.col, 11);
    const AstNode *ifs = blk->list.items[1];
    assert_int_equal(ifs->loc.line, 3);
    assert_int_equal(ifs->loc.col, 3);
    const AstNode *ret = ifs->b->list.items[0];
    assert_int_equal(ret->loc.col, 10);
    assert_int_equal(ret->a->loc.col, 17);                 /* call: its name */
    assert_int_equal(ret->a->list.items[0]->loc.col, 19);  /* named arg: its name */
    assert_int_equal(ret->a->list.items[0]->a->loc.col, 21);
    /* depths */
    assert_int_equal(plus->depth, 2);
    assert_int_equal(asg->depth, 3);
    assert_int_equal(def->depth, 1 + blk->depth);
}

static const char resnet[] =
    "def conv(x, filters, kernel=1, stride=1, pad=0) =\n"
    "    Convolution(x, num_filter=filters, kernel=(kernel,kernel), stride=(stride,stride),\n"
    "                pad=(pad,pad), no_bias=true)\n"
    "def bn(x, last_gamma=false) =\n"
    "    BatchNorm(x, eps=1e-5, momentum=0.9, fix_gamma=false,\n"
    "              gamma=param(wd_mult=0, init=last_gamma ? zero : one), beta=param(wd_mult=0))\n"
    "def block(x, c, stride=1, down=false) {\n"
    "    sc = x\n"
    "    if down {\n"
    "        if stride != 1 { sc = Pooling(sc, pool_type=\"avg\", kernel=(2,2), stride=(2,2)) }\n"
    "        sc = bn(conv(sc, c*4))\n"
    "    }\n"
    "    y = relu(bn(conv(x, c)))\n"
    "    return relu(y + sc)\n"
    "}\n"
    "model resnet50_v1d(data: float32[N,3,224,224], softmax_label: float32[N], classes=1000) {\n"
    "    x = Pooling(x, pool_type=\"max\", kernel=(3,3), stride=(2,2), pad=(1,1))\n"
    "    for i in 1..n { x = block(x, c) }\n"
    "    return SoftmaxOutput(x, softmax_label, smooth_alpha=0.1)\n"
    "}\n"
    "train resnet50_v1d {\n"
    "    batch_size = 512; epochs = 120\n"
    "    optimizer  = nag(momentum=0.9, wd=1e-4, multi_precision=true)\n"
    "    amp        = float16        # bfloat16 | off\n"
    "    data       = cifar10(\"dir\")\n"
    "}\n";

static void test_resnet_example(void **state)
{
    Fx *fx = *state;
    const char *d = dump_of(fx, resnet);
    assert_int_equal(fx->decls.n, 5);
    AstKind kinds[] = {AST_DEF, AST_DEF, AST_DEF, AST_MODEL, AST_TRAIN};
    for (int i = 0; i < 5; i++)
        assert_int_equal(fx->decls.items[i]->kind, kinds[i]);
    assert_non_null(strstr(d, "def bn\n"
                              "  param x\n"
                              "  param last_gamma\n"
                              "    bool false\n"
                              "  call BatchNorm\n"
                              "    arg\n"
                              "      ident x\n"
                              "    arg eps\n"
                              "      float 1e-05\n"));
    assert_non_null(strstr(d, "model resnet50_v1d\n"
                              "  param data: float32[N,3,224,224]\n"
                              "  param softmax_label: float32[N]\n"
                              "  param classes\n"
                              "    int 1000\n"));
    assert_non_null(strstr(d, "    for i\n"
                              "      int 1\n"
                              "      ident n\n"));
    assert_non_null(strstr(d, "  assign amp\n    ident float16\n"));
    const AstNode *train = fx->decls.items[4];
    assert_int_equal(train->list.n, 5);
    assert_string_equal(train->list.items[1]->str, "epochs");
}

/* ---- errors --------------------------------------------------------------- */

static void test_syntax_errors(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f(=) = 1",
                 "1:7: error: syntax error, unexpected '=', expecting identifier or ')'");
}

static void test_syntax_error_source_line(void **state)
{
    Fx *fx = *state;
    assert_false(parse(fx, "def f() {\n  x = = 1\n}\n"));
    assert_string_equal(errors(fx),
                        "t.sym:2:7: error: syntax error, unexpected '='\n"
                        "   x = = 1\n"
                        "       ^\n");
}

static void test_syntax_errors_more(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f(", "1:7: error: syntax error, unexpected end of file, expecting identifier or ')'");
}

static void test_syntax_error_eof_after_newline(void **state)
{
    Fx *fx = *state;
    /* end of file is reported just after the last token */
    expect_error(fx, "def f() {\n  x = 1\n\n  # c\n",
                 "2:8: error: syntax error, unexpected end of file");
}

static void test_syntax_error_keyword(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() { x = 1 } else", "1:19: error: syntax error, unexpected 'else'");
}

static void test_syntax_error_statement(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() { (a) }", "1:11: error: syntax error, unexpected '('");
}

static void test_syntax_error_model_dims(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "model m(x: float32[N,) {}",
                 "1:22: error: syntax error, unexpected ')', expecting identifier or integer");
}

static void test_syntax_error_train(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "train t {\n  a = 1 b\n}",
                 "3:1: error: syntax error, unexpected '}', expecting '='");
}

static void test_syntax_error_range(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() { for i in 1 { } }",
                 "1:22: error: syntax error, unexpected '{'");
}

static void test_unterminated_string_newline(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() =\n  g(\"abc\n\")", "2:5: error: unterminated string");
}

static void test_unterminated_string_eof(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = \"abc\\\"", "1:11: error: unterminated string");
}

static void test_invalid_escape(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = \"ab\\qc\"", "1:14: error: invalid escape '\\q' in string");
}

static void test_stray_char(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() {\n  x = a @ b\n}", "2:9: error: stray '@' in program");
}

static void test_stray_dot(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = a.b", "1:12: error: stray '.' in program");
}

static void test_stray_non_ascii(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = \xc3\xa9", "1:11: error: stray '\\xc3' in program");
}

static void test_stray_control_char(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = \x01", "1:11: error: stray '\\x01' in program: the file looks binary");
}

static void test_integer_too_large(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = 99999999999999999999",
                 "1:11: error: integer literal '99999999999999999999' is too large");
}

static void test_integer_just_too_large(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = 9223372036854775808",
                 "1:11: error: integer literal '9223372036854775808' is too large");
}

static void test_float_too_large(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = 1e999", "1:11: error: float literal '1e999' is too large");
}

static void test_malformed_numbers(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = 12abc", "1:11: error: malformed number '12abc'");
}

static void test_malformed_exponent(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = 1e+", "1:11: error: malformed number '1e+'");
}

static void test_malformed_fraction(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = 1.2.3", "1:11: error: malformed number '1.2.3'");
}

static void test_malformed_suffix(void **state)
{
    Fx *fx = *state;
    expect_error(fx, "def f() = 1.5f", "1:11: error: malformed number '1.5f'");
}

static void test_nul_byte(void **state)
{
    Fx *fx = *state;
    static const char src[] = "def f() = 1\n# x\0y\n";
    expect_error_n(fx, src, sizeof src - 1, "2:4: error: NUL byte in input: the file looks binary");
}

/* A string of n repetitions of unit between prefix and suffix. */
static char *repeat(const char *prefix, const char *unit, int n, const char *mid, const char *close,
                    const char *suffix)
{
    size_t ul = strlen(unit), cl = strlen(close);
    size_t cap = strlen(prefix) + (size_t)n * (ul + cl) + strlen(mid) + strlen(suffix) + 1;
    char *s = malloc(cap), *p = s;
    assert_non_null(s);
    p = stpcpy(p, prefix);
    for (int i = 0; i < n; i++)
        p = stpcpy(p, unit);
    p = stpcpy(p, mid);
    for (int i = 0; i < n; i++)
        p = stpcpy(p, close);
    strcpy(p, suffix);
    return s;
}

static void expect_too_deep(Fx *fx, char *src, const char *where)
{
    char msg[128];
    snprintf(msg, sizeof msg, "%s: error: expression nested too deeply (more than 1000 levels)",
             where);
    expect_error(fx, src, msg);
    free(src);
}

static void test_deep_parens(void **state)
{
    Fx *fx = *state;
    /* the 1001st '(' (column 10 + 1001) */
    expect_too_deep(fx, repeat("def f() = ", "(", 100000, "1", ")", ""), "1:1011");
}

static void test_deep_unary(void **state)
{
    Fx *fx = *state;
    char *src = repeat("def f() = ", "- ", 100000, "x", "", "");
    assert_false(parse(fx, src));
    free(src);
    assert_int_equal(fx->diag.nerr, 1);
    assert_non_null(strstr(errors(fx), "error: expression nested too deeply (more than 1000 levels)\n"));
}

static void test_deep_binary(void **state)
{
    Fx *fx = *state;
    /* 1+1+...: the 1000th '+' makes a node of depth 1001, at column
     * 10 + 2 * 1000 */
    expect_too_deep(fx, repeat("def f() = 1", "+1", 100000, "", "", ""), "1:2010");
}

static void test_deep_cond(void **state)
{
    Fx *fx = *state;
    char *src = repeat("def f() = ", "a ? b : ", 100000, "x", "", "");
    assert_false(parse(fx, src));
    free(src);
    assert_int_equal(fx->diag.nerr, 1);
    assert_non_null(strstr(errors(fx), "error: expression nested too deeply (more than 1000 levels)\n"));
}

static void test_deep_blocks(void **state)
{
    Fx *fx = *state;
    /* "def f() {" then "if x {" each: the 1001st brace is the 1000th if's */
    expect_too_deep(fx, repeat("def f() {", "if x {", 100000, "", "}", "}"), "1:6009");
}

static void test_deep_else_if(void **state)
{
    Fx *fx = *state;
    char *src = repeat("def f() {", "if x {} else ", 100000, "{}", "", "}");
    assert_false(parse(fx, src));
    free(src);
    assert_int_equal(fx->diag.nerr, 1);
    assert_non_null(strstr(errors(fx), "error: expression nested too deeply (more than 1000 levels)\n"));
}

static void test_depth_limit_exact(void **state)
{
    Fx *fx = *state;
    /* 999 unary minus over an identifier: depth 1000, then the def is
     * 1001 deep: reported at the def */
    expect_too_deep(fx, repeat("def f() = ", "-", 999, "x", "", ""), "1:1");
}

static void test_depth_limit_ok(void **state)
{
    Fx *fx = *state;
    char *src = repeat("def f() = ", "-", 998, "x", "", "");
    assert_true(parse(fx, src));
    free(src);
    assert_int_equal(fx->decls.items[0]->depth, 1000);
    /* 1000 brackets deep is fine too */
    char *p = repeat("def f() = ", "(", 1000, "1", ")", "");
    assert_true(parse(fx, p));
    free(p);
    /* and a deep conditional chain */
    char *c = repeat("def f() = ", "a ? b : ", 998, "x", "", "");
    assert_true(parse(fx, c));
    free(c);
    assert_int_equal(fx->diag.nerr, 0);
}

/* A block and an argument are parts of their if, for, def or call, not
 * levels: n nested ifs are n levels (500 used to be refused as "more than
 * 1000 levels"), and so are n nested calls. */
static void test_depth_nested_ifs(void **state)
{
    Fx *fx = *state;
    /* def, 997 ifs, the return, its value: 1000 levels */
    char *src = repeat("def f() {", "if x {", 997, "return y", "}", "}");
    assert_true(parse(fx, src));
    free(src);
    assert_int_equal(fx->decls.items[0]->depth, 1000);
}

static void test_depth_nested_ifs_over(void **state)
{
    /* one if more: the def is the 1001st level */
    expect_too_deep(*state, repeat("def f() {", "if x {", 998, "return y", "}", "}"), "1:1");
}

static void test_depth_nested_calls(void **state)
{
    Fx *fx = *state;
    /* def, 998 calls (with named arguments), the leaf */
    char *calls = repeat("def f() = ", "g(k=", 998, "1", ")", "");
    assert_true(parse(fx, calls));
    free(calls);
    assert_int_equal(fx->decls.items[0]->depth, 1000);
}

static void test_depth_nested_calls_over(void **state)
{
    expect_too_deep(*state, repeat("def f() = ", "g(", 999, "1", ")", ""), "1:1");
}

/* ---- imports -------------------------------------------------------------- */

typedef struct {
    char dir[64];
    char paths[16][128];
    int n;
} TmpDir;

static void tmp_init(TmpDir *t)
{
    strcpy(t->dir, "/tmp/ampc_test_grammar_XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    t->n = 0;
}

static void tmp_write(TmpDir *t, const char *name, const char *text)
{
    char dir[sizeof t->dir];
    memcpy(dir, t->dir, sizeof dir);
    char *path = t->paths[t->n++];
    snprintf(path, sizeof t->paths[0], "%s/%s", dir, name);
    char *slash = strrchr(path, '/');
    if (slash > path + strlen(t->dir)) { /* a subdirectory */
        *slash = 0;
        (void)mkdir(path, 0700);
        *slash = '/';
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void tmp_free(TmpDir *t)
{
    for (int i = t->n - 1; i >= 0; i--)
        unlink(t->paths[i]);
    for (int i = t->n - 1; i >= 0; i--) {
        char *slash = strrchr(t->paths[i], '/');
        *slash = 0;
        if (strcmp(t->paths[i], t->dir) != 0)
            rmdir(t->paths[i]);
    }
    rmdir(t->dir);
}

static const char *names_of(Fx *fx, const AstProgram *p)
{
    free(fx->dump);
    size_t n;
    FILE *f = open_memstream(&fx->dump, &n);
    for (int i = 0; i < p->decls.n; i++)
        fprintf(f, "%s ", p->decls.items[i]->str);
    fclose(f);
    return fx->dump;
}

static void test_import_relative_and_diamond(void **state)
{
    Fx *fx = *state;
    TmpDir t;
    tmp_init(&t);
    tmp_write(&t, "main.sym", "import \"lib/b.sym\"\nimport \"c.sym\"\ndef main_f() = 1\n");
    tmp_write(&t, "lib/b.sym", "import \"d.sym\"\ndef b_f() = 2\n");
    tmp_write(&t, "c.sym", "import \"lib/d.sym\"\nimport \"./lib/../lib/b.sym\"\ndef c_f() = 3\n");
    tmp_write(&t, "lib/d.sym", "def d_f() = 4\n");
    AstProgram p;
    bool ok = ast_load(&fx->arena, &fx->diag, t.paths[0], NULL, 0, &p);
    if (!ok)
        fprintf(stderr, "%s", errors(fx));
    assert_true(ok);
    assert_string_equal(errors(fx), "");
    /* depth-first, imports first, d loaded once */
    assert_string_equal(names_of(fx, &p), "d_f b_f c_f main_f ");
    assert_int_equal(p.main_file, 0);
    assert_int_equal(fx->diag.files.len, 4);
    /* an import's path is joined to its importer's directory */
    char want[192];
    snprintf(want, sizeof want, "%s/lib/d.sym", t.dir);
    assert_string_equal(diag_file(&fx->diag, p.decls.items[0]->loc.file)->path, want);
    snprintf(want, sizeof want, "%s/c.sym", t.dir);
    assert_string_equal(diag_file(&fx->diag, p.decls.items[2]->loc.file)->path, want);
    tmp_free(&t);
}

static void test_import_from_buffer(void **state)
{
    Fx *fx = *state;
    TmpDir t;
    tmp_init(&t);
    tmp_write(&t, "lib.sym", "def lib_f() = 1\n");
    char main_path[128];
    snprintf(main_path, sizeof main_path, "%s/virtual.sym", t.dir);
    const char *text = "import \"lib.sym\"\ndef main_f() = lib_f()\n";
    AstProgram p;
    assert_true(ast_load(&fx->arena, &fx->diag, main_path, text, strlen(text), &p));
    assert_string_equal(names_of(fx, &p), "lib_f main_f ");
    assert_string_equal(diag_file(&fx->diag, p.main_file)->path, main_path);
    tmp_free(&t);
}

static void test_import_cycle(void **state)
{
    Fx *fx = *state;
    TmpDir t;
    tmp_init(&t);
    tmp_write(&t, "a.sym", "import \"b.sym\"\ndef a_f() = 1\n");
    tmp_write(&t, "b.sym", "def b_f() = 2\n\n  import \"a.sym\"\n");
    AstProgram p;
    assert_false(ast_load(&fx->arena, &fx->diag, t.paths[0], NULL, 0, &p));
    assert_int_equal(p.decls.n, 0);
    char want[512];
    snprintf(want, sizeof want,
             "%s/b.sym:3:3: error: import cycle: %s/a.sym -> %s/b.sym -> %s/a.sym\n"
             "   import \"a.sym\"\n"
             "   ^\n",
             t.dir, t.dir, t.dir, t.dir);
    assert_string_equal(errors(fx), want);
    tmp_free(&t);
}

static void test_import_self(void **state)
{
    Fx *fx = *state;
    TmpDir t;
    tmp_init(&t);
    tmp_write(&t, "a.sym", "import \"a.sym\"\n");
    AstProgram p;
    assert_false(ast_load(&fx->arena, &fx->diag, t.paths[0], NULL, 0, &p));
    char want[512];
    snprintf(want, sizeof want, "%s/a.sym:1:1: error: import cycle: %s/a.sym -> %s/a.sym\n", t.dir,
             t.dir, t.dir);
    assert_int_equal(strncmp(errors(fx), want, strlen(want)), 0);
    tmp_free(&t);
}

static void test_import_missing(void **state)
{
    Fx *fx = *state;
    TmpDir t;
    tmp_init(&t);
    tmp_write(&t, "a.sym", "def a_f() = 1\nimport \"x.sym\"\n");
    AstProgram p;
    assert_false(ast_load(&fx->arena, &fx->diag, t.paths[0], NULL, 0, &p));
    char want[512];
    snprintf(want, sizeof want,
             "%s/a.sym:2:1: error: cannot open 'x.sym': No such file or directory\n"
             " import \"x.sym\"\n"
             " ^\n",
             t.dir);
    assert_string_equal(errors(fx), want);
    tmp_free(&t);
}

static void test_import_parse_error(void **state)
{
    Fx *fx = *state;
    TmpDir t;
    tmp_init(&t);
    tmp_write(&t, "a.sym", "import \"b.sym\"\n");
    tmp_write(&t, "b.sym", "def = 1\n");
    AstProgram p;
    assert_false(ast_load(&fx->arena, &fx->diag, t.paths[0], NULL, 0, &p));
    char want[512];
    snprintf(want, sizeof want,
             "%s/b.sym:1:5: error: syntax error, unexpected '=', expecting identifier\n", t.dir);
    assert_int_equal(strncmp(errors(fx), want, strlen(want)), 0);
    assert_int_equal(fx->diag.nerr, 1);
    tmp_free(&t);
}

static void test_main_missing(void **state)
{
    Fx *fx = *state;
    AstProgram p;
    assert_false(ast_load(&fx->arena, &fx->diag, "/nonexistent/dir/m.sym", NULL, 0, &p));
    assert_string_equal(errors(fx),
                        "ampc: error: cannot open '/nonexistent/dir/m.sym': No such file or directory\n");
}

/* A source line over 160 bytes is shown as a window around the caret, "..."
 * at each cut, never splitting a UTF-8 character; the caret still points at
 * the column (one write per diagnostic: stderr is unbuffered). */
static void test_long_line_window(void **state)
{
    Fx *fx = *state;
    char src[2048] = "def f() = \"";
    for (int i = 0; i < 150; i++)
        strcat(src, "\xc3\xa9"); /* é: 2 bytes */
    strcat(src, "\" @ \"");
    for (int i = 0; i < 150; i++)
        strcat(src, "\xc3\xbc"); /* ü */
    strcat(src, "\"\n");
    int col = (int)(strchr(src, '@') - src) + 1;
    char want[64];
    snprintf(want, sizeof want, "1:%d: error: stray '@' in program", col);
    expect_error(fx, src, want);
    const char *line = strchr(errors(fx), '\n') + 1, *eol = strchr(line, '\n');
    const char *caret = eol + 1, *ceol = strchr(caret, '\n');
    assert_int_equal(strncmp(line, " ...", 4), 0);
    assert_int_equal(strncmp(eol - 3, "...", 3), 0);
    assert_true(eol - line <= 1 + 3 + 160 + 3);
    /* the first shown byte starts a character, the last ends one */
    assert_int_not_equal((unsigned char)line[4] & 0xC0, 0x80);
    assert_int_equal((unsigned char)eol[-4] & 0xC0, 0x80);
    assert_int_equal((unsigned char)eol[-5], 0xC3);
    /* the caret is under the '@' */
    assert_int_equal(ceol[-1], '^');
    assert_int_equal(line[ceol - 1 - caret], '@');
}

/* Only regular files are read: a device is refused by kind before a byte
 * is read, a FIFO without a writer is refused at once instead of blocking,
 * a directory by name; an empty regular file still loads. */
static void test_load_not_regular(void **state)
{
    Fx *fx = *state;
    assert_int_equal(diag_load_file(&fx->diag, "/dev/zero"), -1);
    assert_string_equal(diag_load_error(&fx->diag), "not a regular file (a character device)");
    TmpDir t;
    tmp_init(&t);
    tmp_write(&t, "empty.sym", "");
    char fifo[sizeof t.dir + 16];
    snprintf(fifo, sizeof fifo, "%s/fifo", t.dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(diag_load_file(&fx->diag, fifo), -1);
    assert_string_equal(diag_load_error(&fx->diag), "not a regular file (a FIFO)");
    assert_int_equal(diag_load_file(&fx->diag, t.dir), -1);
    assert_string_equal(diag_load_error(&fx->diag), "not a regular file (a directory)");
    int f = diag_load_file(&fx->diag, t.paths[0]);
    assert_true(f >= 0);
    assert_int_equal(diag_file(&fx->diag, f)->len, 0);
    assert_string_equal(diag_load_error(&fx->diag), "");
    unlink(fifo);
    tmp_free(&t);
}

/* A file over AMPC_MAX_SOURCE_BYTES is refused from its size (a sparse file:
 * nothing is written or read); one at the limit's edge is not refused for
 * its size. */
static void test_load_too_big(void **state)
{
    Fx *fx = *state;
    TmpDir t;
    tmp_init(&t);
    tmp_write(&t, "big.sym", "");
    assert_int_equal(truncate(t.paths[0], (off_t)AMPC_MAX_SOURCE_BYTES + 1), 0);
    assert_int_equal(diag_load_file(&fx->diag, t.paths[0]), -1);
    assert_string_equal(diag_load_error(&fx->diag),
                        "it is larger than 256 MiB, the most ampc reads as a source file");
    AstProgram p;
    assert_false(ast_load(&fx->arena, &fx->diag, t.paths[0], NULL, 0, &p));
    assert_non_null(strstr(errors(fx), "big.sym': it is larger than 256 MiB"));
    tmp_free(&t);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_literals),
        T(test_strings),
        T(test_range_lexing),
        T(test_keywords_are_reserved),
        T(test_comments_and_semicolons),
        T(test_empty_file),
        T(test_precedence),
        T(test_associativity),
        T(test_tuples),
        T(test_calls_and_named_args),
        T(test_many_items),
        T(test_def_bodies_and_defaults),
        T(test_model_typed_inputs),
        T(test_train_block),
        T(test_if_else_chain),
        T(test_for_and_return),
        T(test_statements_across_lines),
        T(test_import_decl),
        T(test_locations),
        T(test_resnet_example),
        T(test_syntax_errors),
        T(test_syntax_error_source_line),
        T(test_syntax_errors_more),
        T(test_syntax_error_eof_after_newline),
        T(test_syntax_error_keyword),
        T(test_syntax_error_statement),
        T(test_syntax_error_model_dims),
        T(test_syntax_error_train),
        T(test_syntax_error_range),
        T(test_unterminated_string_newline),
        T(test_unterminated_string_eof),
        T(test_invalid_escape),
        T(test_stray_char),
        T(test_stray_dot),
        T(test_stray_non_ascii),
        T(test_stray_control_char),
        T(test_integer_too_large),
        T(test_integer_just_too_large),
        T(test_float_too_large),
        T(test_malformed_numbers),
        T(test_malformed_exponent),
        T(test_malformed_fraction),
        T(test_malformed_suffix),
        T(test_nul_byte),
        T(test_deep_parens),
        T(test_deep_unary),
        T(test_deep_binary),
        T(test_deep_cond),
        T(test_deep_blocks),
        T(test_deep_else_if),
        T(test_depth_limit_exact),
        T(test_depth_limit_ok),
        T(test_depth_nested_ifs),
        T(test_depth_nested_ifs_over),
        T(test_depth_nested_calls),
        T(test_depth_nested_calls_over),
        T(test_import_relative_and_diamond),
        T(test_import_from_buffer),
        T(test_import_cycle),
        T(test_import_self),
        T(test_import_missing),
        T(test_import_parse_error),
        T(test_main_missing),
        T(test_long_line_window),
        T(test_load_not_regular),
        T(test_load_too_big),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
