/* fuzz_emit_c.c - the libFuzzer target for the C backend (docs/testing.md).
 *
 * Each input is read as a .sym file and as an IR dump, as fuzz_frontend.c
 * does; whatever the front end accepts goes through every pass and, when it
 * can train (a loss head), through cg_emit_c into memory.  When the backend
 * accepts it, the C text must be well-formed whatever the names hold:
 *
 *   - outside string literals and comments, only printable ASCII, blanks and
 *     newlines, and no preprocessor line but those the backend writes
 *     (directives[], each whole);
 *   - every string literal closes on its line and holds only printable ASCII,
 *     with a backslash only before a known escape, and no "??" (a trigraph
 *     under -std=c11);
 *   - every comment closes and opens no other (no "/" "*" inside one);
 *   - no "(null)" in code (what printf makes of a NULL string, e.g. a dtype
 *     the backend has no name for);
 *   - decoding the literals gives back the model's name and every parameter's
 *     and node's name, byte for byte (the escaping loses nothing).
 *
 * When cg_emit_c refuses a graph it must have said why (an error in the
 * Diag).  Anything that crashes, leaks, trips ASan/UBSan or breaks one of
 * the rules above (abort()) is a bug.
 *
 *   make build/fuzz/fuzz_emit_c && tests/fuzz/run.sh build/fuzz/fuzz_emit_c check
 */
#include "driver.h"
#include "fuzz_common.h"
#include "../../codegen/codegen.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ElabOptions fuzz_limits = {
    .max_call_depth = 100,
    .max_loop_iters = 100000,
    .max_nodes = 20000,
    .max_work = 1000000,
    .max_memory = 256 << 20,
};

/* the preprocessor lines the backend writes, whole: the runtime's header,
 * the buffer macro, and AMPC_BUILT_WITH's default (ampc -o defines it) */
static const char *const directives[] = {
    "#include \"program.h\"\n",
    "#define B(i) (ctx->buf[i])\n",
    "#ifndef AMPC_BUILT_WITH\n",
    "#define AMPC_BUILT_WITH \"(compiled by hand from ampc -S)\"\n",
    "#endif\n",
};

static bool known_directive(const char *t, size_t n)
{
    for (size_t k = 0; k < sizeof directives / sizeof directives[0]; k++) {
        size_t len = strlen(directives[k]);
        if (len <= n && memcmp(t, directives[k], len) == 0)
            return true;
    }
    return false;
}

static void bug(const char *what, const char *text, size_t len, size_t at)
{
    fprintf(stderr, "fuzz_emit_c: %s (at byte %zu)\n", what, at);
    if (text)
        fprintf(stderr, "---- C ----\n%.*s\n---- end ----\n", (int)len, text);
    abort();
}

/* The decoded string literals of the C text, each NUL-terminated, one after
 * another in lits (lits_len bytes). */
typedef struct {
    char *lits;
    size_t lits_len, cap;
} Literals;

static void lit_put(Literals *l, char c)
{
    if (l->lits_len + 1 > l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4096;
        l->lits = realloc(l->lits, l->cap);
        if (!l->lits)
            abort();
    }
    l->lits[l->lits_len++] = c;
}

/* A string literal starting at t[i] == '"': checked and decoded; returns the
 * index after its closing quote. */
static size_t scan_literal(const char *t, size_t n, size_t i, Literals *l)
{
    size_t start = i++;
    for (; i < n && t[i] != '"'; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c < 0x20 || c > 0x7e)
            bug("a raw control or non-ASCII byte in a string literal", t, n, i);
        if (c == '?' && i + 1 < n && t[i + 1] == '?')
            bug("two question marks in a string literal (a trigraph under -std=c11)", t, n, i);
        if (c != '\\') {
            lit_put(l, (char)c);
            continue;
        }
        c = (unsigned char)t[++i];
        if (c >= '0' && c <= '7') {
            /* the backend writes exactly three octal digits */
            if (i + 2 >= n || t[i + 1] < '0' || t[i + 1] > '7' || t[i + 2] < '0' || t[i + 2] > '7')
                bug("an octal escape of fewer than three digits", t, n, i);
            int v = (t[i] - '0') * 64 + (t[i + 1] - '0') * 8 + (t[i + 2] - '0');
            if (v == 0 || v > 255)
                bug("an octal escape out of range", t, n, i);
            lit_put(l, (char)v);
            i += 2;
        } else if (c == '"' || c == '\\' || c == '?') {
            lit_put(l, (char)c);
        } else {
            bug("an unknown escape in a string literal", t, n, i);
        }
    }
    if (i >= n)
        bug("a string literal does not close", t, n, start);
    lit_put(l, 0);
    return i + 1;
}

/* The lexical rules of the header comment; the decoded literals go to l. */
static void check_c(const char *t, size_t n, Literals *l)
{
    bool line_start = true;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)t[i];
        if (c == '"') {
            i = scan_literal(t, n, i, l);
            line_start = false;
        } else if (c == '/' && i + 1 < n && t[i + 1] == '*') {
            const char *end = NULL;
            for (size_t k = i + 2; k + 1 < n; k++) {
                if (t[k] == '/' && t[k + 1] == '*')
                    bug("a comment opens inside a comment", t, n, k);
                if (t[k] == '*' && t[k + 1] == '/') {
                    end = t + k;
                    break;
                }
                if ((unsigned char)t[k] > 0x7e || ((unsigned char)t[k] < 0x20 && t[k] != '\n'))
                    bug("a control or non-ASCII byte in a comment", t, n, k);
                if (t[k] == '?' && t[k + 1] == '?')
                    bug("two question marks in a comment (a trigraph could splice lines)", t, n, k);
            }
            if (!end)
                bug("a comment does not close", t, n, i);
            i = (size_t)(end - t) + 2;
            line_start = false;
        } else if (c == '/' && i + 1 < n && t[i + 1] == '/') {
            bug("a line comment (the backend writes none)", t, n, i);
        } else if (c == '\'') {
            bug("a character literal (the backend writes none)", t, n, i);
        } else {
            if ((c < 0x20 && c != '\n') || c > 0x7e)
                bug("a control or non-ASCII byte in code", t, n, i);
            if (c == '?' && i + 1 < n && t[i + 1] == '?')
                bug("two question marks in code", t, n, i);
            if (c == '#' && (!line_start || !known_directive(t + i, n - i)))
                bug("a preprocessor line the backend does not write", t, n, i);
            if (c == '\\')
                bug("a backslash outside a string literal", t, n, i);
            if (c == '(' && n - i >= 6 && memcmp(t + i, "(null)", 6) == 0)
                bug("\"(null)\" in code (printf of a NULL string: a dtype without a kernel?)", t, n,
                    i);
            line_start = c == '\n' || (line_start && c == ' ');
            i++;
        }
    }
}

static bool has_literal(const Literals *l, const char *s)
{
    for (size_t i = 0; i < l->lits_len; i += strlen(l->lits + i) + 1)
        if (strcmp(l->lits + i, s) == 0)
            return true;
    return false;
}

/* Every name the program carries must come back from the literals. */
static void check_names(const Graph *g, const Literals *l, const char *t, size_t n)
{
    if (!has_literal(l, g->model))
        bug("the model's name does not decode from the literals", t, n, 0);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *nd = g->nodes[i];
        bool named = nd->op == OP_Param || nd->op == OP_Input;
        if (named && !has_literal(l, nd->name)) {
            fprintf(stderr, "fuzz_emit_c: missing name '%s'\n", nd->name);
            bug("a parameter's or input's name does not decode from the literals", t, n, 0);
        }
    }
}

static Graph *run_passes(Graph *g)
{
    static const PassOptions defaults = {0};
    for (int i = 1; i < pass_count; i++) {
        if (!pass_pipeline[i].run(&g, &defaults)) {
            graph_free(g);
            return NULL;
        }
    }
    return g;
}

static bool has_loss_head(const Graph *g)
{
    for (int i = 0; i < g->noutputs; i++)
        if (op_is_loss_head(g->nodes[g->outputs[i]]->op))
            return true;
    return false;
}

static void emit_and_check(Diag *d, Graph *g)
{
    if (!g)
        return;
    if (has_loss_head(g) && g->infer) {
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        if (!m)
            abort();
        int nerr = d->nerr;
        /* the planner runs on whatever the fuzzer builds, and its plans are
         * proved: a refused plan is a bug */
        BufferPlan tp, ip;
        memplan(g, true, &tp);
        memplan(g->infer, true, &ip);
        if (!memplan_verify(g, &tp, stderr) || !memplan_verify(g->infer, &ip, stderr))
            bug("the memory plan verifier refused a plan", NULL, 0, 0);
        CgPlans plans = {&tp, &ip, NULL, TARGET_CPU};
        bool ok = cg_emit_c(m, g, &plans);
        plan_free(&tp);
        plan_free(&ip);
        if (fclose(m))
            abort();
        if (ok) {
            Literals l = {0};
            check_c(text, len, &l);
            check_names(g, &l, text, len);
            free(l.lits);
        } else if (d->nerr == nerr) {
            bug("cg_emit_c refused a graph without an error", NULL, 0, 0);
        }
        free(text);
    }
    graph_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Diag d;
    diag_init(&d, null_out());
    /* 1. as a model definition */
    Graph *g = frontend_elaborate(&d, "fuzz.sym", (const char *)data, size, &fuzz_limits);
    emit_and_check(&d, g ? run_passes(g) : NULL);
    /* 2. as an IR dump */
    int f = diag_add_buffer(&d, "fuzz.ir", (const char *)data, size);
    Graph *h = ir_read(&d, f);
    emit_and_check(&d, h ? run_passes(h) : NULL);
    diag_free(&d);
    return 0;
}
