/* parser.y - the grammar of a .sym file (see docs/language.md).
 *
 * A pure LALR(1) parser with locations and lookahead correction (LAC), so
 * that "expecting ..." lists are exact.  It stops at the first error.  Every
 * node is allocated from the caller's arena, so aborting leaks nothing; the
 * only malloc'ed memory is bison's own stack, which bison frees on every
 * path.  Depth is bounded three ways: each node's depth (1 + its deepest
 * child) is checked against AST_MAX_DEPTH as it is built, the scanner bounds
 * bracket nesting, and YYMAXDEPTH bounds the parser stack (its overflow,
 * "memory exhausted", is reported as the same nesting error).
 */

%code top {
/* Generated code: keep -Wall -Wextra -Werror quiet under gcc and clang. */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wunused-macros"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wshadow"
#endif
}

%code requires {
#include <setjmp.h>
#include "ast.h"

#ifndef YY_TYPEDEF_YY_SCANNER_T
#define YY_TYPEDEF_YY_SCANNER_T
typedef void *yyscan_t;
#endif

/* State shared by the parser and the scanner of one file. */
typedef struct ParseCtx {
    Arena *arena;
    Diag *diag;
    int file;          /* Diag file index */
    AstList result;    /* the top-level declarations */
    int nerr;          /* errors reported while parsing this file */
    /* scanner state */
    int line, col;         /* position of the next character */
    int tok_line, tok_col; /* just past the last token (end-of-file errors) */
    int nest;              /* open brackets */
    struct {
        char ch;           /* '(', '[' or '{' */
        int line, col;
    } open[AST_MAX_DEPTH]; /* where each open bracket is, innermost last */
    jmp_buf *fatal_jmp;    /* where a fatal flex error goes */
} ParseCtx;
}

%code provides {
int yylex(YYSTYPE *lval, YYLTYPE *lloc, yyscan_t scanner);
}

%code {
#include <string.h>

/* Room for any input within AST_MAX_DEPTH (a few stack entries per level);
 * deeper input overflows it and is reported as too deeply nested. */
#define YYMAXDEPTH 20000

static void yyerror(YYLTYPE *l, yyscan_t scanner, ParseCtx *c, const char *msg);
static AstNode *mk(ParseCtx *c, AstKind k, YYLTYPE l);
static AstNode *done(ParseCtx *c, AstNode *n);
static void push(ParseCtx *c, AstList *l, AstNode *n);
static AstNode *leaf(ParseCtx *c, AstKind k, YYLTYPE l, const char *s);
static AstNode *unary(ParseCtx *c, int op, AstNode *a, YYLTYPE l);
static AstNode *binary(ParseCtx *c, int op, AstNode *a, AstNode *b, YYLTYPE l);

/* Finishes a node built in an action: computes its depth and aborts the
 * parse if it is too deep (done() has reported it). */
#define FIN(n)                    \
    do {                          \
        if (!done(ctx, (n)))      \
            YYABORT;              \
    } while (0)
#define CHK(n)                    \
    do {                          \
        if (!(n))                 \
            YYABORT;              \
    } while (0)
}

%define api.pure full
%locations
%define parse.error detailed
%define parse.lac full
%param {yyscan_t scanner}
%parse-param {ParseCtx *ctx}
%expect 0

%union {
    AstNode *node;
    AstList list;
    const char *str;
    int64_t ival;
    double fval;
}

%token <str>  IDENT  "identifier"
%token <ival> INT    "integer"
%token <fval> FLOAT  "number"
%token <str>  STRING "string"
%token KW_DEF "'def'" KW_MODEL "'model'" KW_TRAIN "'train'" KW_IMPORT "'import'"
%token KW_IF "'if'" KW_ELSE "'else'" KW_FOR "'for'" KW_IN "'in'" KW_RETURN "'return'"
%token KW_TRUE "'true'" KW_FALSE "'false'"
%token EQ "'=='" NE "'!='" LE "'<='" GE "'>='" AND "'&&'" OR "'||'" DOTDOT "'..'"

%right '?' ':'
%left OR
%left AND
%left EQ NE
%left '<' '>' LE GE
%left '+' '-'
%left '*' '/' '%'
%precedence UNARY

%type <list> decls params_opt params mparams_opt mparams dims stmts train_items
%type <list> args_opt args exprs
%type <node> decl param mparam dim block stmt if_stmt train_item arg expr primary

%start program

%%

program
    : decls                     { ctx->result = $1; }
    ;

decls
    : %empty                    { $$ = (AstList){0}; }
    | decls decl                { $$ = $1; push(ctx, &$$, $2); }
    | decls ';'                 { $$ = $1; }
    ;

decl
    : KW_IMPORT STRING          { $$ = leaf(ctx, AST_IMPORT, @1, $2); }
    | KW_DEF IDENT '(' params_opt ')' '=' expr {
            $$ = leaf(ctx, AST_DEF, @1, $2); $$->params = $4; $$->a = $7; FIN($$);
        }
    | KW_DEF IDENT '(' params_opt ')' block {
            $$ = leaf(ctx, AST_DEF, @1, $2); $$->params = $4; $$->b = $6; FIN($$);
        }
    | KW_MODEL IDENT '(' mparams_opt ')' block {
            $$ = leaf(ctx, AST_MODEL, @1, $2); $$->params = $4; $$->b = $6; FIN($$);
        }
    | KW_TRAIN IDENT '{' train_items '}' {
            $$ = leaf(ctx, AST_TRAIN, @1, $2); $$->list = $4; FIN($$);
        }
    ;

params_opt
    : %empty                    { $$ = (AstList){0}; }
    | params
    | params ','
    ;

params
    : param                     { $$ = (AstList){0}; push(ctx, &$$, $1); }
    | params ',' param          { $$ = $1; push(ctx, &$$, $3); }
    ;

param
    : IDENT                     { $$ = leaf(ctx, AST_PARAM, @1, $1); }
    | IDENT '=' expr            { $$ = leaf(ctx, AST_PARAM, @1, $1); $$->a = $3; FIN($$); }
    ;

mparams_opt
    : %empty                    { $$ = (AstList){0}; }
    | mparams
    | mparams ','
    ;

mparams
    : mparam                    { $$ = (AstList){0}; push(ctx, &$$, $1); }
    | mparams ',' mparam        { $$ = $1; push(ctx, &$$, $3); }
    ;

mparam
    : param
    | IDENT ':' IDENT '[' dims ']' {
            $$ = leaf(ctx, AST_PARAM, @1, $1); $$->dtype = $3; $$->list = $5; FIN($$);
        }
    ;

dims
    : dim                       { $$ = (AstList){0}; push(ctx, &$$, $1); }
    | dims ',' dim              { $$ = $1; push(ctx, &$$, $3); }
    ;

dim
    : INT                       { $$ = mk(ctx, AST_INT, @1); $$->ival = $1; FIN($$); }
    | IDENT                     { $$ = leaf(ctx, AST_IDENT, @1, $1); }
    ;

train_items
    : %empty                    { $$ = (AstList){0}; }
    | train_items train_item    { $$ = $1; push(ctx, &$$, $2); }
    | train_items ';'           { $$ = $1; }
    ;

train_item
    : IDENT '=' expr            { $$ = leaf(ctx, AST_ASSIGN, @1, $1); $$->a = $3; FIN($$); }
    ;

block
    : '{' stmts '}'             { $$ = mk(ctx, AST_BLOCK, @1); $$->list = $2; FIN($$); }
    ;

stmts
    : %empty                    { $$ = (AstList){0}; }
    | stmts stmt                { $$ = $1; push(ctx, &$$, $2); }
    | stmts ';'                 { $$ = $1; }
    ;

stmt
    : IDENT '=' expr            { $$ = leaf(ctx, AST_ASSIGN, @1, $1); $$->a = $3; FIN($$); }
    | if_stmt
    | KW_FOR IDENT KW_IN expr DOTDOT expr block {
            $$ = leaf(ctx, AST_FOR, @1, $2); $$->a = $4; $$->b = $6; $$->c = $7; FIN($$);
        }
    | KW_RETURN expr            { $$ = mk(ctx, AST_RETURN, @1); $$->a = $2; FIN($$); }
    ;

if_stmt
    : KW_IF expr block {
            $$ = mk(ctx, AST_IF, @1); $$->a = $2; $$->b = $3; FIN($$);
        }
    | KW_IF expr block KW_ELSE block {
            $$ = mk(ctx, AST_IF, @1); $$->a = $2; $$->b = $3; $$->c = $5; FIN($$);
        }
    | KW_IF expr block KW_ELSE if_stmt {
            $$ = mk(ctx, AST_IF, @1); $$->a = $2; $$->b = $3; $$->c = $5; FIN($$);
        }
    ;

expr
    : expr '?' expr ':' expr {
            $$ = mk(ctx, AST_COND, @1); $$->a = $1; $$->b = $3; $$->c = $5; FIN($$);
        }
    | expr OR expr              { $$ = binary(ctx, AOP_OR, $1, $3, @2); CHK($$); }
    | expr AND expr             { $$ = binary(ctx, AOP_AND, $1, $3, @2); CHK($$); }
    | expr EQ expr              { $$ = binary(ctx, AOP_EQ, $1, $3, @2); CHK($$); }
    | expr NE expr              { $$ = binary(ctx, AOP_NE, $1, $3, @2); CHK($$); }
    | expr '<' expr             { $$ = binary(ctx, '<', $1, $3, @2); CHK($$); }
    | expr '>' expr             { $$ = binary(ctx, '>', $1, $3, @2); CHK($$); }
    | expr LE expr              { $$ = binary(ctx, AOP_LE, $1, $3, @2); CHK($$); }
    | expr GE expr              { $$ = binary(ctx, AOP_GE, $1, $3, @2); CHK($$); }
    | expr '+' expr             { $$ = binary(ctx, '+', $1, $3, @2); CHK($$); }
    | expr '-' expr             { $$ = binary(ctx, '-', $1, $3, @2); CHK($$); }
    | expr '*' expr             { $$ = binary(ctx, '*', $1, $3, @2); CHK($$); }
    | expr '/' expr             { $$ = binary(ctx, '/', $1, $3, @2); CHK($$); }
    | expr '%' expr             { $$ = binary(ctx, '%', $1, $3, @2); CHK($$); }
    | '-' expr %prec UNARY      { $$ = unary(ctx, '-', $2, @1); CHK($$); }
    | '!' expr %prec UNARY      { $$ = unary(ctx, '!', $2, @1); CHK($$); }
    | primary
    ;

primary
    : INT                       { $$ = mk(ctx, AST_INT, @1); $$->ival = $1; FIN($$); }
    | FLOAT                     { $$ = mk(ctx, AST_FLOAT, @1); $$->fval = $1; FIN($$); }
    | STRING                    { $$ = leaf(ctx, AST_STR, @1, $1); }
    | KW_TRUE                   { $$ = mk(ctx, AST_BOOL, @1); $$->bval = true; FIN($$); }
    | KW_FALSE                  { $$ = mk(ctx, AST_BOOL, @1); $$->bval = false; FIN($$); }
    | IDENT                     { $$ = leaf(ctx, AST_IDENT, @1, $1); }
    | IDENT '(' args_opt ')'    { $$ = leaf(ctx, AST_CALL, @1, $1); $$->list = $3; FIN($$); }
    | '(' exprs ')' {
            if ($2.n == 1) {
                $$ = $2.items[0];   /* parentheses only group */
            } else {
                $$ = mk(ctx, AST_TUPLE, @1); $$->list = $2; FIN($$);
            }
        }
    | '(' exprs ',' ')'         { $$ = mk(ctx, AST_TUPLE, @1); $$->list = $2; FIN($$); }
    | '(' ')'                   { $$ = mk(ctx, AST_TUPLE, @1); FIN($$); }
    ;

exprs
    : expr                      { $$ = (AstList){0}; push(ctx, &$$, $1); }
    | exprs ',' expr            { $$ = $1; push(ctx, &$$, $3); }
    ;

args_opt
    : %empty                    { $$ = (AstList){0}; }
    | args
    | args ','
    ;

args
    : arg                       { $$ = (AstList){0}; push(ctx, &$$, $1); }
    | args ',' arg              { $$ = $1; push(ctx, &$$, $3); }
    ;

arg
    : expr                      { $$ = mk(ctx, AST_ARG, @1); $$->a = $1; FIN($$); }
    | IDENT '=' expr            { $$ = leaf(ctx, AST_ARG, @1, $1); $$->a = $3; FIN($$); }
    ;

%%

static void yyerror(YYLTYPE *l, yyscan_t scanner, ParseCtx *c, const char *msg)
{
    (void)scanner;
    Loc at = {c->file, l->first_line, l->first_column};
    if (strcmp(msg, "memory exhausted") == 0)
        diag_error(c->diag, at, "expression nested too deeply (more than %d levels)", AST_MAX_DEPTH);
    else
        diag_error(c->diag, at, "%s", msg);
    c->nerr++;
    /* a missing ')' is seen only at the next token, maybe lines later:
     * say which bracket it would close, as clang does */
    if (c->nest > 0 && c->nest <= AST_MAX_DEPTH) {
        int i = c->nest - 1;
        char ch = c->open[i].ch, want[4] = {'\'', ch == '(' ? ')' : ch == '[' ? ']' : '}', '\'', 0};
        Loc open = {c->file, c->open[i].line, c->open[i].col};
        if (strstr(msg, want) || strstr(msg, "end of file"))
            diag_note(c->diag, open, "to match this '%c'", ch);
        else if (ch != '{' && open.line < at.line) /* a statement's brackets rarely span lines */
            diag_note(c->diag, open, "this '%c' is still open (a missing '%c'?)", ch, want[1]);
    }
}

static AstNode *mk(ParseCtx *c, AstKind k, YYLTYPE l)
{
    AstNode *n = arena_alloc(c->arena, sizeof *n);
    n->kind = k;
    n->loc = (Loc){c->file, l.first_line, l.first_column};
    return n;
}

static int list_depth(const AstList *l)
{
    int d = 0;
    for (int i = 0; i < l->n; i++)
        if (l->items[i]->depth > d)
            d = l->items[i]->depth;
    return d;
}

/* Sets n->depth; reports and returns NULL if it is past the limit.  A
 * level is a construct the user nests: an operator, a call, a tuple, a
 * statement, a declaration, a leaf.  A block (the braces of an if, a for or
 * a def) and an argument (the slot of a call) are parts of their construct,
 * not levels of their own, so 500 nested ifs are 500 levels, not 1000. */
static AstNode *done(ParseCtx *c, AstNode *n)
{
    int d = 0;
    const AstNode *kids[3] = {n->a, n->b, n->c};
    for (int i = 0; i < 3; i++)
        if (kids[i] && kids[i]->depth > d)
            d = kids[i]->depth;
    int ld = list_depth(&n->list), pd = list_depth(&n->params);
    d = ld > d ? ld : d;
    d = pd > d ? pd : d;
    n->depth = n->kind == AST_BLOCK || n->kind == AST_ARG ? d : d + 1;
    if (n->depth > AST_MAX_DEPTH) {
        diag_error(c->diag, n->loc, "expression nested too deeply (more than %d levels)",
                   AST_MAX_DEPTH);
        c->nerr++;
        return NULL;
    }
    return n;
}

/* Appends to an arena list.  The capacity is implicit: n rounded up to a
 * power of two (at least 4), so a full list has n == capacity. */
static void push(ParseCtx *c, AstList *l, AstNode *n)
{
    if (l->n == 0 || (l->n >= 4 && (l->n & (l->n - 1)) == 0)) {
        int cap = l->n == 0 ? 4 : l->n * 2;
        AstNode **items = arena_alloc(c->arena, (size_t)cap * sizeof *items);
        if (l->n)
            memcpy(items, l->items, (size_t)l->n * sizeof *items);
        l->items = items;
    }
    l->items[l->n++] = n;
}

static AstNode *leaf(ParseCtx *c, AstKind k, YYLTYPE l, const char *s)
{
    AstNode *n = mk(c, k, l);
    n->str = s;
    n->depth = 1;
    return n;
}

static AstNode *unary(ParseCtx *c, int op, AstNode *a, YYLTYPE l)
{
    AstNode *n = mk(c, AST_UNARY, l);
    n->op = op;
    n->a = a;
    return done(c, n);
}

static AstNode *binary(ParseCtx *c, int op, AstNode *a, AstNode *b, YYLTYPE l)
{
    AstNode *n = mk(c, AST_BINARY, l);
    n->op = op;
    n->a = a;
    n->b = b;
    return done(c, n);
}
