/* ast.c - loading a program (a main file and its imports) and the debug
 * dump of syntax trees.  Parsing itself is ast_parse() in lexer.l.
 *
 * Imports are resolved relative to the directory of the importing file, each
 * distinct file (by realpath, else by the joined path) is parsed once, and
 * the declarations are collected depth-first, imports before the importer.
 * The walk uses an explicit stack: a long import chain cannot overflow the C
 * stack.
 */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700
#endif

#include "ast.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *key;       /* realpath, or the joined path if that fails (malloc'ed) */
    int file;        /* Diag file index */
    AstList decls;   /* as parsed, imports included */
    bool done;       /* its decls have been emitted */
} LoadedFile;

typedef struct {
    int lf;          /* index into the LoadedFile Vec */
    int next;        /* next decl to look at for imports */
} LoadFrame;

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (!p)
        DIE("out of memory");
    return memcpy(p, s, n);
}

static char *file_key(const char *path)
{
    char *r = realpath(path, NULL);
    return r ? r : xstrdup(path);
}

/* dir(importer) + "/" + path, or path itself when it is absolute or the
 * importer has no directory part.  Malloc'ed. */
static char *join_path(const char *importer, const char *path)
{
    const char *slash = strrchr(importer, '/');
    if (path[0] == '/' || !slash)
        return xstrdup(path);
    size_t dn = (size_t)(slash - importer) + 1, pn = strlen(path);
    char *p = malloc(dn + pn + 1);
    if (!p)
        DIE("out of memory");
    memcpy(p, importer, dn);
    memcpy(p + dn, path, pn + 1);
    return p;
}

static int find_loaded(const Vec *files, const char *key)
{
    for (int i = 0; i < files->len; i++)
        if (strcmp(VEC_AT(*files, LoadedFile, i).key, key) == 0)
            return i;
    return -1;
}

/* Parses file index f into a new LoadedFile; returns its index or -1. */
static int add_loaded(Arena *arena, Diag *d, Vec *files, int f, char *key)
{
    AstList decls;
    if (!ast_parse(arena, d, f, &decls)) {
        free(key);
        return -1;
    }
    LoadedFile *lf = vec_push(files, sizeof(LoadedFile));
    lf->key = key;
    lf->file = f;
    lf->decls = decls;
    lf->done = false;
    return files->len - 1;
}

/* "a.sym -> b.sym -> a.sym": the stack from the frame of file `from` up,
 * then `from` again. */
static void report_cycle(Diag *d, const Vec *files, const Vec *stack, int from, Loc at)
{
    size_t cap = 1;
    int first = 0;
    for (int i = 0; i < stack->len; i++)
        if (VEC_AT(*stack, LoadFrame, i).lf == from)
            first = i;
    for (int i = first; i < stack->len; i++) {
        const LoadedFile *lf = &VEC_AT(*files, LoadedFile, VEC_AT(*stack, LoadFrame, i).lf);
        cap += strlen(diag_file(d, lf->file)->path) + 4;
    }
    const char *back = diag_file(d, VEC_AT(*files, LoadedFile, from).file)->path;
    cap += strlen(back);
    char *chain = malloc(cap);
    if (!chain)
        DIE("out of memory");
    chain[0] = 0;
    for (int i = first; i < stack->len; i++) {
        const LoadedFile *lf = &VEC_AT(*files, LoadedFile, VEC_AT(*stack, LoadFrame, i).lf);
        strcat(chain, diag_file(d, lf->file)->path);
        strcat(chain, " -> ");
    }
    strcat(chain, back);
    diag_error(d, at, "import cycle: %s", chain);
    free(chain);
}

bool ast_load(Arena *arena, Diag *d, const char *path, const char *text, size_t len,
              AstProgram *out)
{
    out->decls = (AstList){0};
    out->main_file = -1;

    int main_file = text ? diag_add_buffer(d, path, text, len) : diag_load_file(d, path);
    if (main_file < 0) {
        diag_plain_error(d, "cannot open '%s': %s", path, diag_load_error(d));
        return false;
    }
    out->main_file = main_file;

    Vec files = {0}, stack = {0}, decls = {0};
    bool ok = false;
    int lf0 = add_loaded(arena, d, &files, main_file, file_key(path));
    if (lf0 < 0)
        goto out;
    ((LoadFrame *)vec_push(&stack, sizeof(LoadFrame)))->lf = lf0;

    while (stack.len > 0) {
        LoadFrame *top = &VEC_AT(stack, LoadFrame, stack.len - 1);
        LoadedFile *cur = &VEC_AT(files, LoadedFile, top->lf);
        const AstNode *imp = NULL;
        while (top->next < cur->decls.n && !imp) {
            const AstNode *n = cur->decls.items[top->next++];
            if (n->kind == AST_IMPORT)
                imp = n;
        }
        if (!imp) {
            /* all of its imports are in: emit its own decls */
            for (int i = 0; i < cur->decls.n; i++)
                if (cur->decls.items[i]->kind != AST_IMPORT)
                    *(AstNode **)vec_push(&decls, sizeof(AstNode *)) = cur->decls.items[i];
            cur->done = true;
            stack.len--;
            continue;
        }
        char *joined = join_path(diag_file(d, cur->file)->path, imp->str);
        char *key = file_key(joined);
        int seen = find_loaded(&files, key);
        if (seen >= 0) {
            free(joined);
            free(key);
            if (!VEC_AT(files, LoadedFile, seen).done) {
                report_cycle(d, &files, &stack, seen, imp->loc);
                goto out;
            }
            continue; /* already loaded (a diamond) */
        }
        int f = diag_load_file(d, joined);
        free(joined);
        if (f < 0) {
            diag_error(d, imp->loc, "cannot open '%s': %s", imp->str, diag_load_error(d));
            free(key);
            goto out;
        }
        int lf = add_loaded(arena, d, &files, f, key); /* may move files.data */
        if (lf < 0)
            goto out;
        ((LoadFrame *)vec_push(&stack, sizeof(LoadFrame)))->lf = lf;
    }

    out->decls.n = decls.len;
    if (decls.len) {
        out->decls.items = arena_alloc(arena, (size_t)decls.len * sizeof(AstNode *));
        memcpy(out->decls.items, decls.data, (size_t)decls.len * sizeof(AstNode *));
    }
    ok = true;

out:
    for (int i = 0; i < files.len; i++)
        free(VEC_AT(files, LoadedFile, i).key);
    vec_free(&files);
    vec_free(&stack);
    vec_free(&decls);
    return ok;
}

/* ---- debug dump ---------------------------------------------------------- */

static void dump_op(FILE *f, int op)
{
    const char *s;
    switch (op) {
    case AOP_EQ: s = "=="; break;
    case AOP_NE: s = "!="; break;
    case AOP_LE: s = "<="; break;
    case AOP_GE: s = ">="; break;
    case AOP_AND: s = "&&"; break;
    case AOP_OR: s = "||"; break;
    default: fprintf(f, "%c\n", op); return;
    }
    fprintf(f, "%s\n", s);
}

static void dump_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\t')
            fputs("\\t", f);
        else if (ch < 32 || ch == 127)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* The shortest %g form that reads back as the same double; whole numbers
 * keep a ".0" so that they do not read as integers. */
static void dump_float(FILE *f, double x)
{
    char buf[40];
    if (x > -1e15 && x < 1e15 && x == (double)(long long)x) {
        fprintf(f, "%.1f", x);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    fputs(buf, f);
}

static void dump_list(FILE *f, const AstList *l, int indent)
{
    for (int i = 0; i < l->n; i++)
        ast_dump(f, l->items[i], indent);
}

void ast_dump(FILE *f, const AstNode *n, int indent)
{
    if (!n)
        return;
    fprintf(f, "%*s", 2 * indent, "");
    switch (n->kind) {
    case AST_INT: fprintf(f, "int %lld\n", (long long)n->ival); return;
    case AST_FLOAT:
        fputs("float ", f);
        dump_float(f, n->fval);
        fputc('\n', f);
        return;
    case AST_BOOL: fprintf(f, "bool %s\n", n->bval ? "true" : "false"); return;
    case AST_STR:
        fputs("str ", f);
        dump_str(f, n->str);
        fputc('\n', f);
        return;
    case AST_IDENT: fprintf(f, "ident %s\n", n->str); return;
    case AST_TUPLE: fprintf(f, "tuple %d\n", n->list.n); break;
    case AST_UNARY:
        fputs("unary ", f);
        dump_op(f, n->op);
        break;
    case AST_BINARY:
        fputs("binary ", f);
        dump_op(f, n->op);
        break;
    case AST_COND: fputs("cond\n", f); break;
    case AST_CALL: fprintf(f, "call %s\n", n->str); break;
    case AST_ARG:
        if (n->str)
            fprintf(f, "arg %s\n", n->str);
        else
            fputs("arg\n", f);
        break;
    case AST_ASSIGN: fprintf(f, "assign %s\n", n->str); break;
    case AST_IF: fputs("if\n", f); break;
    case AST_FOR: fprintf(f, "for %s\n", n->str); break;
    case AST_RETURN: fputs("return\n", f); break;
    case AST_BLOCK: fputs("block\n", f); break;
    case AST_PARAM:
        fprintf(f, "param %s", n->str);
        if (n->dtype) {
            fprintf(f, ": %s[", n->dtype);
            for (int i = 0; i < n->list.n; i++) {
                const AstNode *dim = n->list.items[i];
                if (i)
                    fputc(',', f);
                if (dim->kind == AST_INT)
                    fprintf(f, "%lld", (long long)dim->ival);
                else
                    fputs(dim->str, f);
            }
            fputc(']', f);
        }
        fputc('\n', f);
        ast_dump(f, n->a, indent + 1);
        return;
    case AST_DEF: fprintf(f, "def %s\n", n->str); break;
    case AST_MODEL: fprintf(f, "model %s\n", n->str); break;
    case AST_TRAIN: fprintf(f, "train %s\n", n->str); break;
    case AST_IMPORT:
        fputs("import ", f);
        dump_str(f, n->str);
        fputc('\n', f);
        return;
    default: fprintf(f, "?%d\n", (int)n->kind); return;
    }
    dump_list(f, &n->params, indent + 1);
    ast_dump(f, n->a, indent + 1);
    ast_dump(f, n->b, indent + 1);
    ast_dump(f, n->c, indent + 1);
    dump_list(f, &n->list, indent + 1);
}
