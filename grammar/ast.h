/* ast.h - the grammar layer: the syntax tree of a .sym file and the loader
 * that parses a file and its imports.
 *
 * The tree is what the parser saw, with a location on every node; meaning
 * (names, calls, ops) is given by passes/elaborate.c.
 */
#ifndef AMPC_AST_H
#define AMPC_AST_H

#include "../ir/ir.h"

typedef enum {
    /* expressions */
    AST_INT,     /* ival */
    AST_FLOAT,   /* fval */
    AST_BOOL,    /* bval */
    AST_STR,     /* str: contents with escapes resolved */
    AST_IDENT,   /* str: the name */
    AST_TUPLE,   /* list: items ("()" is the empty tuple, "(a,)" a 1-tuple) */
    AST_UNARY,   /* op ('-', '!'), a */
    AST_BINARY,  /* op, a, b */
    AST_COND,    /* a ? b : c */
    AST_CALL,    /* str: callee name, list: AST_ARG */
    AST_ARG,     /* str: name or NULL for positional, a: value */
    /* statements */
    AST_ASSIGN,  /* str: target, a: value */
    AST_IF,      /* a: condition, b: then (AST_BLOCK), c: else (AST_BLOCK, AST_IF or NULL) */
    AST_FOR,     /* str: variable, a: from, b: to (exclusive), c: body (AST_BLOCK) */
    AST_RETURN,  /* a: value */
    AST_BLOCK,   /* list: statements */
    /* declarations (top level) */
    AST_PARAM,   /* str: name, a: default or NULL; for model inputs also
                    dtype (type name) and list: dims (AST_INT or AST_IDENT) */
    AST_DEF,     /* str: name, params: AST_PARAM, a: expression body, or
                    b: block body (AST_BLOCK); exactly one is set */
    AST_MODEL,   /* str: name, params: AST_PARAM (typed inputs have dtype set), b: body */
    AST_TRAIN,   /* str: model name, list: AST_ASSIGN (key = value) */
    AST_IMPORT,  /* str: the path as written */
} AstKind;

/* Binary and unary operators: the character itself for single-character
 * ones, these for the rest. */
enum {
    AOP_EQ = 256, /* == */
    AOP_NE,       /* != */
    AOP_LE,       /* <= */
    AOP_GE,       /* >= */
    AOP_AND,      /* && (also the keyword and) */
    AOP_OR,       /* || (also the keyword or) */
    /* single-char: '+' '-' '*' '/' '%' '<' '>' '!' */
};

typedef struct AstNode AstNode;
typedef struct {
    AstNode **items;
    int n;
} AstList;

struct AstNode {
    AstKind kind;
    Loc loc;        /* first character of the construct; for AST_BINARY the operator */
    int op;         /* AST_UNARY, AST_BINARY */
    int64_t ival;
    double fval;
    bool bval;
    const char *str;
    const char *dtype;  /* AST_PARAM of a model: "float32", ... */
    AstNode *a, *b, *c;
    AstList list;
    AstList params;     /* AST_DEF, AST_MODEL */
    int depth;          /* 1 + the deepest child (blocks and arguments add
                           no level): bounded by AST_MAX_DEPTH */
};

/* A parsed program: the top-level declarations of the main file and, once,
 * of every file it imports (depth-first, imports before the importer). */
typedef struct {
    AstList decls;  /* AST_DEF, AST_MODEL, AST_TRAIN (imports resolved away) */
    int main_file;  /* Diag file index of the main file */
} AstProgram;

/* Parses one file already in d's table.  Errors are reported through d;
 * returns false on any error.  Nodes come from arena. */
bool ast_parse(Arena *arena, Diag *d, int file, AstList *out);

/* Loads path (or, if text is non-NULL, that buffer named path), parses it
 * and its imports recursively (paths relative to the importing file; a file
 * imported twice is loaded once; a cycle is an error that names the chain).
 * Returns false on any error. */
bool ast_load(Arena *arena, Diag *d, const char *path, const char *text, size_t len,
              AstProgram *out);

/* Debug print of a tree, one node per line (tests). */
void ast_dump(FILE *f, const AstNode *n, int indent);

/* Nesting limit of the parser (parentheses, blocks, operators): a deeper
 * input is an error, never a stack overflow. */
#define AST_MAX_DEPTH 1000

#endif
