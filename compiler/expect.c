/* expect.c - ampc --expect FILE: assertions on what a compilation made,
 * checked after it (docs/ci.md, "Expect files"), and --expect-update, the
 * accept mode that rewrites their exact values from this compilation (as
 * expecttest's EXPECTTEST_ACCEPT does); bounds stay as written.
 *
 *   # a comment
 *   casts.remaining == 2                 a report field (docs/report.md) and a value
 *   memplan.per_sample_bytes <= 150MiB   ==, !=, <, <=, >, >=; B, KiB, MiB, GiB
 *   amp.dtype == float16                 a string (bare or "quoted")
 *   fusions.bn_relu >= 1
 *   stage*_conv* : f16                   every node matching the glob has this dtype
 *
 * A report field is a path into the --report=json document, so the two
 * can never disagree; a node's dtype is read from the last graph the
 * compilation made (the scheduled training graph of a model that trains).
 * A failure is an error at the file's line with the expected and actual
 * values, and ampc exits 1. */
#include "driver.h"

#include <ctype.h>
#include <fnmatch.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

typedef enum { EX_EQ, EX_NE, EX_LT, EX_LE, EX_GT, EX_GE } ExOp;
static const char *const op_text[] = {"==", "!=", "<", "<=", ">", ">="};

/* One line being checked: where it is, and (for the accept mode) where its
 * value sits in the text. */
typedef struct {
    Diag *d;
    int file;
    const char *text; /* the file */
    int line;
    const char *p, *end, *start;
    bool failed;    /* an assertion does not hold, or a line is malformed */
    bool malformed; /* a line is malformed: the accept mode writes nothing */
    bool update;
    struct json_object *report;
    const Graph *g;
    FILE *out;          /* the rewritten file (update) */
    const char *copied; /* text up to here is in out */
} Ex;

static Loc at(const Ex *x) { return (Loc){x->file, x->line, (int)(x->p - x->start) + 1}; }

static void skip_blanks(Ex *x)
{
    while (x->p < x->end && (*x->p == ' ' || *x->p == '\t' || *x->p == '\r'))
        x->p++;
}

static bool fail(Ex *x, Loc l, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(Ex *x, Loc l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_verror_in(x->d, l, -1, fmt, ap);
    va_end(ap);
    x->failed = true;
    return false;
}

/* A line that is no assertion (the accept mode then leaves the file alone). */
#define malformed(x, ...) ((x)->malformed = true, fail((x), __VA_ARGS__))

/* A token: up to a blank, or a quoted string (its quotes kept). */
static size_t token(const Ex *x)
{
    const char *q = x->p;
    if (q < x->end && *q == '"') {
        for (q++; q < x->end && *q != '"' && *q != '\n'; q++)
            q += *q == '\\' && q + 1 < x->end;
        return (size_t)(q + (q < x->end && *q == '"') - x->p);
    }
    while (q < x->end && !isspace((unsigned char)*q) && *q != '#')
        q++;
    return (size_t)(q - x->p);
}

/* ---- values -------------------------------------------------------------- */

typedef struct {
    bool is_num, is_null;
    double num;
    char str[256];
} Val;

/* 150MiB, 2.5GiB, 1e6, 25576264, float16, "a b", null */
static bool parse_value(Ex *x, const char *s, size_t n, Val *v)
{
    memset(v, 0, sizeof *v);
    if (n >= sizeof v->str)
        return malformed(x, at(x), "value too long");
    if (n >= 2 && s[0] == '"') {
        size_t k = 0;
        for (size_t i = 1; i + 1 < n; i++)
            v->str[k++] = s[i] == '\\' && i + 2 < n ? s[++i] : s[i];
        v->str[k] = 0;
        return true;
    }
    memcpy(v->str, s, n);
    v->str[n] = 0;
    if (strcmp(v->str, "null") == 0) {
        v->is_null = true;
        return true;
    }
    char *e;
    double d = strtod(v->str, &e);
    if (e == v->str || !(isdigit((unsigned char)v->str[0]) || v->str[0] == '-' || v->str[0] == '.'))
        return true; /* a word */
    static const struct {
        const char *unit;
        double scale;
    } units[] = {
        {"", 1},     {"B", 1},    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
        {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}};
    for (int i = 0; i < (int)(sizeof units / sizeof units[0]); i++)
        if (strcmp(e, units[i].unit) == 0) {
            v->is_num = true;
            v->num = d * units[i].scale;
            return true;
        }
    return malformed(x, at(x),
                     "'%s': a number, a number of bytes with a unit (B, KiB, MiB, GiB, KB, "
                     "MB, GB), or a word",
                     v->str);
}

/* A JSON value as a Val (objects and arrays are not comparable). */
static bool json_value(struct json_object *j, Val *v)
{
    memset(v, 0, sizeof *v);
    switch (json_object_get_type(j)) {
    case json_type_null: v->is_null = true; return true;
    case json_type_int:
        v->is_num = true;
        v->num = (double)json_object_get_int64(j);
        return true;
    case json_type_double:
        v->is_num = true;
        v->num = json_object_get_double(j);
        return true;
    case json_type_boolean:
        snprintf(v->str, sizeof v->str, "%s", json_object_get_boolean(j) ? "true" : "false");
        return true;
    case json_type_string:
        snprintf(v->str, sizeof v->str, "%s", json_object_get_string(j));
        return true;
    default: return false;
    }
}

static void value_text(const Val *v, char *buf, size_t cap)
{
    if (v->is_null)
        snprintf(buf, cap, "null");
    else if (v->is_num && v->num == (double)(int64_t)v->num)
        snprintf(buf, cap, "%lld", (long long)v->num);
    else if (v->is_num)
        json_number_text(v->num, buf, cap);
    else {
        bool bare = v->str[0] && !isdigit((unsigned char)v->str[0]) && v->str[0] != '-';
        for (const char *c = v->str; bare && *c; c++)
            bare = isalnum((unsigned char)*c) || *c == '_' || *c == '.';
        snprintf(buf, cap, bare ? "%s" : "\"%s\"", v->str);
    }
}

static bool holds(ExOp op, const Val *want, const Val *got)
{
    if (want->is_num && got->is_num) {
        double a = got->num, b = want->num;
        switch (op) {
        case EX_EQ: return a == b;
        case EX_NE: return a != b;
        case EX_LT: return a < b;
        case EX_LE: return a <= b;
        case EX_GT: return a > b;
        default: return a >= b;
        }
    }
    bool same = want->is_null == got->is_null && want->is_num == got->is_num &&
                strcmp(want->str, got->str) == 0;
    return op == EX_EQ ? same : op == EX_NE ? !same : false;
}

/* ---- the two kinds of line ---------------------------------------------------- */

/* The field at a dotted path of the report ("memplan.per_sample_bytes"). */
static struct json_object *field(struct json_object *j, const char *path)
{
    char part[128];
    while (j && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof part)
            return NULL;
        memcpy(part, path, n);
        part[n] = 0;
        struct json_object *next = NULL;
        if (!json_object_is_type(j, json_type_object) || !json_object_object_get_ex(j, part, &next))
            return NULL;
        j = next;
        path += n + (path[n] == '.');
    }
    return j;
}

/* Replaces the value at [from, to) of the file with text (accept mode). */
static void rewrite(Ex *x, const char *from, const char *to, const char *text)
{
    fwrite(x->copied, 1, (size_t)(from - x->copied), x->out);
    fputs(text, x->out);
    x->copied = to;
}

static bool check_field(Ex *x, const char *path, Loc pl, ExOp op, const Val *want, const char *vs,
                        size_t vn, Loc vl)
{
    struct json_object *j = field(x->report, path);
    Val got;
    if (!j)
        return fail(x, pl, "'%s' is no field of the report (docs/report.md; ampc --report=json)",
                    path);
    if (!json_value(j, &got))
        return fail(x, pl, "'%s' is an object or a list, not a value: name a field inside it",
                    path);
    char gt[64], wt[300];
    value_text(&got, gt, sizeof gt);
    if (x->update && op == EX_EQ) { /* accept: the exact value becomes this compilation's */
        rewrite(x, vs, vs + vn, gt);
        return true;
    }
    if (holds(op, want, &got))
        return true;
    snprintf(wt, sizeof wt, "%.*s", (int)vn, vs);
    return fail(x, vl, "expected %s %s %s, got %s", path, op_text[op], wt, gt);
}

/* GLOB : DTYPE over the nodes of the final graph */
static bool check_dtype(Ex *x, const char *glob, Loc gl, const char *ds, size_t dn, Loc dl)
{
    char want[32];
    snprintf(want, sizeof want, "%.*s", (int)(dn < sizeof want ? dn : sizeof want - 1), ds);
    DType t = dtype_parse(want);
    if (t == DT_UNKNOWN)
        return malformed(x, dl, "unknown dtype '%s' (f16, bf16, f32, ...)", want);
    const Node *bad = NULL, *first = NULL;
    int matched = 0;
    bool one_dtype = true;
    for (int i = 0; i < x->g->nnodes; i++) {
        const Node *n = x->g->nodes[i];
        if (fnmatch(glob, n->name, 0) != 0)
            continue;
        matched++;
        if (!first)
            first = n;
        one_dtype = one_dtype && n->dtype == first->dtype;
        if (n->dtype != t && (!bad || strcmp(n->name, bad->name) < 0))
            bad = n; /* the smallest name: independent of storage order */
    }
    if (!matched)
        return fail(x, gl, "no node matches '%s'", glob);
    if (x->update && one_dtype) {
        rewrite(x, ds, ds + dn, dtype_short(first->dtype));
        return true;
    }
    if (!bad)
        return true;
    return fail(x, dl, "expected %s : %s, but '%s' is %s (%d %s)", glob, want, bad->name,
                dtype_short(bad->dtype), matched, matched == 1 ? "node matches" : "nodes match");
}

static bool check_line(Ex *x)
{
    skip_blanks(x);
    if (x->p >= x->end || *x->p == '\n' || *x->p == '#')
        return true;
    Loc l1 = at(x);
    size_t n1 = token(x);
    char lhs[256];
    if (n1 >= sizeof lhs)
        return malformed(x, l1, "name too long");
    snprintf(lhs, sizeof lhs, "%.*s", (int)n1, x->p);
    x->p += n1;
    skip_blanks(x);
    Loc lo = at(x);
    size_t no = token(x);
    int op = -1;
    for (int k = 0; k < 6; k++)
        if (strlen(op_text[k]) == no && strncmp(op_text[k], x->p, no) == 0)
            op = k;
    bool dtype_line = no == 1 && *x->p == ':';
    if (op < 0 && !dtype_line)
        return malformed(x, lo, "expected ==, !=, <, <=, >, >= or ':' after '%s'", lhs);
    x->p += no;
    skip_blanks(x);
    Loc lv = at(x);
    const char *vs = x->p;
    size_t vn = token(x);
    if (vn == 0)
        return malformed(x, lv, "expected a value");
    x->p += vn;
    skip_blanks(x);
    if (x->p < x->end && *x->p != '\n' && *x->p != '#')
        return malformed(x, at(x), "unexpected text after the value");
    if (dtype_line)
        return check_dtype(x, lhs, l1, vs, vn, lv);
    Val want;
    const char *save = x->p;
    x->p = vs;
    bool ok = parse_value(x, vs, vn, &want);
    x->p = save;
    return ok && check_field(x, lhs, l1, (ExOp)op, &want, vs, vn, lv);
}

static struct json_object *report_object(const Report *r)
{
    MemFile m;
    report_json(mem_open(&m), r);
    char *buf = mem_close(&m);
    struct json_object *j = json_tokener_parse(buf);
    if (!j)
        DIE("the report is not JSON");
    free(buf);
    return j;
}

bool expect_run(Diag *d, const char *path, const Report *r, const Graph *g, bool update)
{
    int file = diag_load_file(d, path);
    if (file < 0) {
        diag_plain_error(d, "cannot read '%s': %s", path, diag_load_error(d));
        return false;
    }
    const SrcFile *f = diag_file(d, file);
    MemFile out = {0};
    Ex x = {.d = d,
            .file = file,
            .text = f->text,
            .p = f->text,
            .end = f->text + f->len,
            .start = f->text,
            .line = 1,
            .update = update,
            .report = report_object(r),
            .g = g,
            .copied = f->text};
    if (update)
        x.out = mem_open(&out);
    if (memchr(f->text, 0, f->len)) {
        malformed(&x, at(&x), "file looks binary (it contains a NUL byte)");
        x.p = x.end;
    }
    while (x.p < x.end) {
        check_line(&x);
        while (x.p < x.end && *x.p != '\n')
            x.p++;
        if (x.p < x.end)
            x.p++, x.line++, x.start = x.p;
    }
    json_object_put(x.report);
    bool ok = !x.failed;
    if (x.out) {
        fwrite(x.copied, 1, (size_t)(x.end - x.copied), x.out);
        mem_close(&out);
        /* only a file that changed is written, and only when every line
         * parsed; a bound that fails is still an error */
        if (!x.malformed && (out.len != f->len || memcmp(out.text, f->text, out.len) != 0))
            ok = cg_rewrite_file(d, path, out.text, out.len) && ok;
        free(out.text);
    }
    return ok;
}
