/* diff.c - ampc diff A B: what differs between two compilations, by class,
 * totals first (docs/ci.md, "ampc diff").
 *
 * A and B are model files (compiled here with the flags given, or per side
 * with --a-flags/--b-flags), text dumps (either --dump-ids form) or JSON
 * documents (an ampc-graph or ampc-report), in any mix.  Everything becomes
 * the same two things first: a graph's nodes keyed by name, and the facts of
 * a report.  A model file is compiled by running this ampc as a child
 * process (an argument vector, never a shell) into a private temporary
 * directory, so a diff of two model files is exactly a diff of the JSON
 * documents `ampc --dump-format=json --report=json` writes for them.
 *
 * Nodes match by name; a node left unmatched then matches one of the other
 * side whose op, attributes, dtype and shape agree and whose inputs already
 * match (parameters and inputs without a match are matched along with their
 * reader), repeated until nothing more matches: a rename.  Provenance is
 * left out unless --compare-provenance.  Exit 0 when equal, 1 when they
 * differ, 2 on an error, as diff(1). */
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ---- the two sides -------------------------------------------------------- */

typedef struct {
    const char *name, *op, *dtype, *shape, *layout;
    const char *attrs; /* "kernel=(3,3), stride=(1,1), ..." */
    const char **attr; /* the same, one by one */
    int nattr;
    int nin;
    int *in;   /* node indices of the same side */
    int match; /* the other side's node, or -1 */
    bool renamed;
} DNode;

typedef struct {
    const char *key;  /* "params.trainable" */
    const char *text; /* as printed */
    double num;
    bool is_num;
} Fact;

#define MAX_FACTS 64
typedef struct {
    const char *path;
    const char *kind;  /* "model", "ir", "graph", "report" */
    const char *after; /* the pass the graph is after, or NULL */
    const char *model;
    Arena a;
    DNode *nodes; /* NULL: no graph (a report) */
    int n;
    StrMap byname;
    Fact facts[MAX_FACTS];
    int nfacts;
    bool has_graph, has_report;
    char *prov; /* the provenance object as JSON text, or NULL */
} Side;

typedef struct {
    const char *common[64]; /* flags for compiling both model files */
    int ncommon;
    const char *aflags, *bflags;
    unsigned ignore; /* bit k: class k ignored */
    bool json, provenance;
    const char *self; /* this ampc */
} DiffOpts;

enum {
    C_NODES,
    C_RENAMES,
    C_CASTS,
    C_FUSIONS,
    C_DTYPES,
    C_SHAPES,
    C_LAYOUTS,
    C_ATTRS,
    C_INPUTS,
    C_PARAMS,
    C_MEMPLAN,
    C_PLACEMENT,
    C_TRAIN,
    C_PROVENANCE,
    C_COUNT
};
static const char *const class_names[C_COUNT] = {
    "nodes", "renames", "casts",  "fusions", "dtypes",    "shapes", "layouts",
    "attrs", "inputs",  "params", "memplan", "placement", "train",  "provenance"};

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ampc diff: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

static void add_fact(Side *s, const char *key, json_object *v)
{
    if (s->nfacts == MAX_FACTS || !v)
        return;
    Fact *f = &s->facts[s->nfacts++];
    f->key = arena_strdup(&s->a, key);
    f->is_num = json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double);
    f->num = f->is_num ? json_object_get_double(v) : 0;
    f->text = arena_strdup(
        &s->a, json_object_is_type(v, json_type_null) ? "null" : json_object_get_string(v));
}

static void add_fact_num(Side *s, const char *key, int64_t v)
{
    json_object *j = json_object_new_int64(v);
    add_fact(s, key, j);
    json_object_put(j);
}

static json_object *get(json_object *o, const char *k)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static const char *get_str(json_object *o, const char *k)
{
    json_object *v = get(o, k);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* ---- reading a graph document --------------------------------------------- */

/* Which documents this ampc reads: its own versions and the previous one
 * (docs/ci.md, "Schema versions").  Version 1 is the first. */
static bool schema_readable(const char *schema, const char *kind)
{
    char want[64];
    snprintf(want, sizeof want, "ampc-%s/", kind);
    if (!schema || strncmp(schema, want, strlen(want)) != 0)
        return false;
    long v = strtol(schema + strlen(want), NULL, 10);
    return v >= 1 && v <= 1; /* the current version is 1; there is no earlier one yet */
}

/* *acc += v, saturating (a document is input: its shapes may be anything) */
static void add_sat(int64_t *acc, int64_t v)
{
    if (__builtin_add_overflow(*acc, v, acc))
        *acc = INT64_MAX;
}

/* A parameter's facts, as report.c's graph_stats counts them. */
static void param_facts(const DNode *d, int64_t *trainable, int64_t *aux, int64_t *bytes)
{
    int64_t n = 1;
    for (const char *p = d->shape + 1; d->shape[0] == '[' && *p && *p != ']';) {
        char *e;
        long long v = strtoll(p, &e, 10);
        if (e == p || v < 0)
            return; /* a symbolic dimension: not a parameter's */
        if (__builtin_mul_overflow(n, (int64_t)v, &n))
            n = INT64_MAX;
        p = *e == ',' ? e + 1 : e;
    }
    bool moving = strstr(d->attrs, "kind=moving_") != NULL;
    bool shadow = strstr(d->attrs, "master=float32") && strcmp(d->dtype, "f32") != 0;
    int size = dtype_size(dtype_parse(d->dtype));
    int64_t b;
    add_sat(moving ? aux : trainable, n);
    if (__builtin_mul_overflow(n, (int64_t)((size ? size : 4) + (shadow ? 4 : 0)), &b))
        b = INT64_MAX;
    add_sat(bytes, b);
}

/* The facts a graph holds: its node count, casts, parameters, fusions. */
static void graph_facts(Side *s)
{
    static const struct {
        const char *rule, *op;
    } fused[] = {{"bn_relu", "_fused_BatchNorm_relu"},
                 {"add_relu", "_fused_add_relu"},
                 {"bn_add_relu", "_fused_BatchNorm_add_relu"},
                 {"cast_softmax_output", "_fused_cast_SoftmaxOutput"},
                 {"softmax_output_bwd_cast", "_backward_fused_SoftmaxOutput_cast"}};
    int64_t casts = 0, trainable = 0, aux = 0, bytes = 0, nf[8] = {0}, fusions = 0;
    enum { NF = sizeof fused / sizeof fused[0] };
    _Static_assert(NF <= 8, "nf holds every fusion");
    for (int i = 0; i < s->n; i++) {
        const DNode *d = &s->nodes[i];
        casts += strcmp(d->op, "Cast") == 0 || strcmp(d->op, "amp_cast") == 0;
        fusions += op_made_by_fuse(op_lookup(d->op));
        if (strcmp(d->op, "Param") == 0)
            param_facts(d, &trainable, &aux, &bytes);
        for (int k = 0; k < NF; k++)
            nf[k] += strcmp(d->op, fused[k].op) == 0;
    }
    add_fact_num(s, "nodes", s->n - casts - fusions); /* the other classes count theirs */
    add_fact_num(s, "casts", casts);
    add_fact_num(s, "params.trainable", trainable);
    add_fact_num(s, "params.aux", aux);
    add_fact_num(s, "params.bytes", bytes);
    char key[64];
    for (int k = 0; k < NF; k++) {
        snprintf(key, sizeof key, "fusions.%s", fused[k].rule);
        add_fact_num(s, key, nf[k]);
    }
}

static char *join_attrs(Arena *a, json_object *attrs, DNode *d)
{
    size_t n = json_object_is_type(attrs, json_type_array) ? json_object_array_length(attrs) : 0,
           len = 1;
    d->nattr = (int)n;
    d->attr = arena_alloc(a, sizeof(char *) * (n + 1));
    for (size_t i = 0; i < n; i++) { /* a document is input: a null item is "" */
        const char *t = json_object_get_string(json_object_array_get_idx(attrs, i));
        d->attr[i] = arena_strdup(a, t ? t : "");
    }
    for (size_t i = 0; i < n; i++)
        len += strlen(d->attr[i]) + 2;
    char *out = arena_alloc(a, len);
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(out, ", ");
        strcat(out, d->attr[i]);
    }
    return out;
}

static int read_graph(Side *s, json_object *root)
{
    json_object *nodes = get(root, "nodes");
    if (!nodes || !json_object_is_type(nodes, json_type_array))
        return fail("'%s': no \"nodes\" list", s->path);
    s->after = arena_strdup(&s->a, get_str(root, "after") ? get_str(root, "after") : "?");
    s->n = (int)json_object_array_length(nodes);
    s->nodes = arena_alloc(&s->a, sizeof(DNode) * (size_t)(s->n + 1));
    for (int i = 0; i < s->n; i++) {
        json_object *o = json_object_array_get_idx(nodes, (size_t)i);
        DNode *d = &s->nodes[i];
        const char *f[5] = {get_str(o, "name"), get_str(o, "op"), get_str(o, "dtype"),
                            get_str(o, "shape"), get_str(o, "layout")};
        for (int k = 0; k < 5; k++)
            if (!f[k])
                return fail("'%s': node %d lacks a string field (name, op, dtype, shape, layout)",
                            s->path, i);
        if (op_lookup(f[1]) == OP_COUNT)
            return fail("'%s': node '%s' has the unknown op '%s'", s->path, f[0], f[1]);
        if (strcmp(f[2], "?") != 0 && dtype_parse(f[2]) == DT_UNKNOWN)
            return fail("'%s': node '%s' has the unknown dtype '%s'", s->path, f[0], f[2]);
        if (strcmp(f[3], "?") != 0 && (f[3][0] != '[' || f[3][strlen(f[3]) - 1] != ']'))
            return fail("'%s': node '%s' has the shape '%s' (as [N,3,224,224], or ?)", s->path,
                        f[0], f[3]);
        if (strcmp(f[4], "nchw") != 0 && strcmp(f[4], "nhwc") != 0)
            return fail("'%s': node '%s' has the layout '%s' (nchw or nhwc)", s->path, f[0], f[4]);
        d->name = arena_strdup(&s->a, f[0]);
        d->op = arena_strdup(&s->a, f[1]);
        d->dtype = arena_strdup(&s->a, f[2]);
        d->shape = arena_strdup(&s->a, f[3]);
        d->layout = arena_strdup(&s->a, f[4]);
        d->attrs = join_attrs(&s->a, get(o, "attrs"), d);
        d->match = -1;
        if (!strmap_put(&s->byname, d->name, i))
            return fail("'%s': two nodes named '%s' (names are unique in a graph)", s->path,
                        d->name);
        json_object *in = get(o, "inputs");
        d->nin =
            in && json_object_is_type(in, json_type_array) ? (int)json_object_array_length(in) : 0;
        d->in = arena_alloc(&s->a, sizeof(int) * (size_t)(d->nin + 1));
        for (int j = 0; j < d->nin; j++) {
            const char *nm = json_object_get_string(json_object_array_get_idx(in, (size_t)j));
            int *k = nm ? strmap_get(&s->byname, nm) : NULL;
            if (!k) /* nodes come inputs first (the canonical order) */
                return fail("'%s': node '%s' reads '%s', which no node before it is", s->path,
                            d->name, nm ? nm : "?");
            d->in[j] = *k;
        }
    }
    s->has_graph = true;
    graph_facts(s);
    json_object *train = get(root, "train");
    for (size_t i = 0; train && i < json_object_array_length(train); i++) {
        json_object *e = json_object_array_get_idx(train, i);
        char key[160];
        snprintf(key, sizeof key, "train.%s", get_str(e, "key") ? get_str(e, "key") : "?");
        add_fact(s, key, get(e, "value"));
    }
    return 0;
}

/* The facts of a report: its memory plan and placement (the graph facts
 * come from the graph itself where there is one). */
static int read_report(Side *s, json_object *root)
{
    static const char *const plan[] = {"fixed_bytes", "per_sample_bytes", NULL};
    static const char *const place[] = {"kvstore", "machine",          "devices", "machines",
                                        "buckets", "bucket_cap_bytes", "wire",    NULL};
    static const char *const params[] = {"trainable", "aux", "bytes", NULL};
    char key[96];
    json_object *m = get(root, "memplan"), *p = get(root, "placement"), *q = get(root, "params");
    for (int k = 0; plan[k] && m && !json_object_is_type(m, json_type_null); k++) {
        snprintf(key, sizeof key, "memplan.%s", plan[k]);
        add_fact(s, key, get(m, plan[k]));
    }
    for (int k = 0; place[k] && p && !json_object_is_type(p, json_type_null); k++) {
        snprintf(key, sizeof key, "placement.%s", place[k]);
        add_fact(s, key, get(p, place[k]));
    }
    for (int k = 0; params[k] && !s->has_graph && q; k++) {
        snprintf(key, sizeof key, "params.%s", params[k]);
        add_fact(s, key, get(q, params[k]));
    }
    s->has_report = true;
    return 0;
}

static int read_document(Side *s, const char *text, size_t len)
{
    json_tokener *tok = json_tokener_new_ex(JSON_TOKENER_DEFAULT_DEPTH);
    if (!tok)
        DIE("out of memory");
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error e = json_tokener_get_error(tok);
    json_tokener_free(tok);
    if (!root || e != json_tokener_success) {
        json_object_put(root);
        return fail("'%s': not JSON (%s)", s->path, json_tokener_error_desc(e));
    }
    const char *schema = get_str(root, "schema");
    int rc = 0;
    if (schema_readable(schema, "graph"))
        rc = read_graph(s, root);
    else if (schema_readable(schema, "report"))
        rc = read_report(s, root);
    else
        rc = fail("'%s': %s%s%s: ampc diff reads ampc-graph and ampc-report documents", s->path,
                  schema ? "a document of schema '" : "no \"schema\" member", schema ? schema : "",
                  schema ? "'" : "");
    if (!rc && !s->model && get_str(root, "model"))
        s->model = arena_strdup(&s->a, get_str(root, "model"));
    json_object *prov = get(root, "provenance");
    if (!rc && prov && !s->prov)
        s->prov = arena_strdup(&s->a, json_object_to_json_string_ext(prov, JSON_C_TO_STRING_PLAIN));
    json_object_put(root);
    return rc;
}

/* ---- running ampc --------------------------------------------------------- */

static bool slurp(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    MemFile m;
    mem_open(&m);
    char chunk[65536];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0)
        fwrite(chunk, 1, k, m.f);
    bool ok = !ferror(f);
    fclose(f);
    *out = mem_close(&m);
    *len = m.len;
    return ok;
}

/* Splits --a-flags' text on blanks (no quoting: no shell sees it); -1
 * when there are more than cap. */
static int split_flags(char *text, const char **argv, int cap)
{
    int n = 0;
    for (char *t = strtok(text, " \t\n"); t; t = strtok(NULL, " \t\n")) {
        if (n == cap)
            return -1;
        argv[n++] = t;
    }
    return n;
}

/* Compiles a model file with this ampc into dir: the report on stdout
 * (dir/report.json), the graph after cast-elide and after schedule. */
static int compile_model(const DiffOpts *o, Side *s, const char *side_flags, const char *dir)
{
    enum { MAX_SIDE_FLAGS = 64 };
    const char *argv[8 + (int)(sizeof o->common / sizeof o->common[0]) + MAX_SIDE_FLAGS];
    int n = 0;
    char dumpdir[4200], out[4200];
    snprintf(dumpdir, sizeof dumpdir, "--dump-dir=%s", dir);
    snprintf(out, sizeof out, "%s/report.json", dir);
    argv[n++] = o->self;
    argv[n++] = s->path;
    for (int i = 0; i < o->ncommon; i++)
        argv[n++] = o->common[i];
    char *flags = side_flags ? strdup(side_flags) : NULL;
    if (side_flags && !flags)
        DIE("out of memory");
    int k = flags ? split_flags(flags, argv + n, MAX_SIDE_FLAGS) : 0;
    if (k < 0) {
        free(flags);
        return fail("more than %d flags in --a-flags or --b-flags", MAX_SIDE_FLAGS);
    }
    n += k;
    const char *tail[] = {"--dump=cast-elide",  "--dump=schedule",
                          "--dump-format=json", dumpdir,
                          "--report=json",      NULL};
    for (int i = 0; tail[i]; i++)
        argv[n++] = tail[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, o->self, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    free(flags);
    if (rc != 0)
        return fail("cannot run '%s': %s", o->self, strerror(rc));
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return fail("waiting for ampc: %s", strerror(errno));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return fail("'%s' does not compile (above)", s->path);
    return 0;
}

static int read_file_doc(Side *s, const char *path)
{
    char *text;
    size_t len;
    if (!slurp(path, &text, &len))
        return fail("cannot read '%s': %s", path, strerror(errno));
    int rc = read_document(s, text, len);
    free(text);
    return rc;
}

static int load_model(const DiffOpts *o, Side *s, const char *side_flags)
{
    const char *tmpdir = getenv("TMPDIR");
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/ampc-diff.XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(dir))
        return fail("cannot create a temporary directory '%s': %s", dir, strerror(errno));
    int rc = compile_model(o, s, side_flags, dir);
    static const char *const files[] = {"09.schedule.json", "05.cast-elide.json", "report.json"};
    bool graph = false;
    for (int i = 0; i < 3 && !rc; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (i < 2 && (graph || access(path, R_OK) != 0))
            continue; /* the scheduled graph of a model that trains, else the forward one */
        graph = true;
        rc = read_file_doc(s, path);
    }
    for (int i = 0; i < 3; i++) { /* only the files it made */
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
    s->kind = "model";
    return rc;
}

/* A text dump: read and checked as --from-ir reads it, then as JSON. */
static int load_text_dump(Side *s)
{
    Diag d;
    diag_init(&d, stderr);
    int file = diag_load_file(&d, s->path), rc = 0;
    if (file < 0) {
        rc = fail("cannot read '%s': %s", s->path, diag_load_error(&d));
        diag_free(&d);
        return rc;
    }
    int after = frontend_dump_after(diag_file(&d, file));
    Graph *g = ir_read(&d, file);
    PassOptions po = {0};
    if (!g || (after >= 0 && !frontend_check_dump(g, after, &po))) {
        graph_free(g);
        diag_free(&d);
        return fail("'%s' is no dump ampc reads (above)", s->path);
    }
    /* how it was made: its own provenance line (the reader skipped it) */
    const SrcFile *f = diag_file(&d, file);
    const char *line = strstr(f->text, "\n# provenance: ");
    if (line) {
        line += strlen("\n# provenance: ");
        json_object *p = json_tokener_parse(arena_strndup(&s->a, line, strcspn(line, "\n")));
        if (p)
            s->prov =
                arena_strdup(&s->a, json_object_to_json_string_ext(p, JSON_C_TO_STRING_PLAIN));
        json_object_put(p);
    }
    Provenance prov = {.input_kind = "ir"};
    provenance_hash(&prov, &d, file + 1);
    MemFile m;
    graph_json(mem_open(&m), g, after >= 0 ? pass_pipeline[after].name : "elaborate", &prov);
    char *text = mem_close(&m);
    rc = read_document(s, text, m.len);
    free(m.text);
    graph_free(g);
    diag_free(&d);
    s->kind = "ir";
    return rc;
}

static int load_side(const DiffOpts *o, Side *s, const char *path, const char *side_flags)
{
    arena_init(&s->a);
    s->path = path;
    char head[64] = "";
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail("cannot read '%s': %s", path, strerror(errno));
    size_t k = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    head[k] = 0;
    const char *p = head + strspn(head, " \t\r\n");
    size_t n = strlen(path);
    if (*p == '{' || *p == '[') {
        s->kind = "document";
        int rc = read_file_doc(s, path);
        if (!rc)
            s->kind = s->has_graph ? "graph" : "report";
        return rc;
    }
    if (strncmp(p, "# ampc-ir", 9) == 0 || (n > 3 && strcmp(path + n - 3, ".ir") == 0))
        return load_text_dump(s);
    if (strncmp(p, "# ampc program", 14) == 0)
        return fail("'%s' is a program dump: compare the models, or their --dump=program "
                    "--dump-format=json documents with a JSON tool",
                    path);
    return load_model(o, s, side_flags);
}

static void side_free(Side *s)
{
    strmap_free(&s->byname);
    arena_free(&s->a);
}

/* ---- matching ------------------------------------------------------------------ */

static void pair(Side *a, Side *b, int i, int j, bool renamed)
{
    a->nodes[i].match = j;
    b->nodes[j].match = i;
    b->nodes[j].renamed = a->nodes[i].renamed = renamed;
}

/* What a node must agree on to match a renamed one: op, dtype, shape,
 * layout, attributes, and each input as the other side names it (a matched
 * one), or as a leaf of the same kind (an unmatched parameter or input). */
static char *node_key(Arena *t, const Side *s, const Side *other, bool is_a, const DNode *d,
                      bool *ok)
{
    MemFile m;
    FILE *f = mem_open(&m);
    fprintf(f, "%s|%s|%s|%s|", d->op, d->dtype, d->shape, d->layout);
    for (int q = 0; q < d->nattr; q++) /* a node's name in absorbed= follows renames */
        if (strncmp(d->attr[q], "absorbed=", 9) != 0)
            fprintf(f, "%s,", d->attr[q]);
    *ok = true;
    for (int j = 0; j < d->nin; j++) {
        const DNode *x = &s->nodes[d->in[j]];
        /* a matched input by the name on side A (so both sides' keys agree) */
        const char *aname = x->match < 0 ? NULL : is_a ? x->name : other->nodes[x->match].name;
        if (aname)
            fprintf(f, "|=%s", aname);
        else if (x->nin == 0)
            fprintf(f, "|~%s:%s:%s:%s", x->op, x->dtype, x->shape, x->attrs);
        else
            *ok = false;
    }
    char *k = arena_strdup(t, mem_close(&m));
    free(m.text);
    return k;
}

/* One round over the unmatched nodes; the count of new matches. */
static int match_round(Side *a, Side *b)
{
    Arena t;
    arena_init(&t);
    StrMap keys = {0};
    bool ok;
    for (int i = 0; i < a->n; i++) {
        if (a->nodes[i].match >= 0 || a->nodes[i].nin == 0)
            continue;
        char *k = node_key(&t, a, b, true, &a->nodes[i], &ok);
        if (ok && !strmap_put(&keys, k, i))
            *strmap_get(&keys, k) = -1; /* two candidates: no rename */
    }
    /* each B key once: two B nodes with one key match neither */
    StrMap seen = {0};
    int *cand = malloc(sizeof(int) * (size_t)(b->n + 1));
    if (!cand)
        DIE("out of memory");
    for (int j = 0; j < b->n; j++) {
        cand[j] = -1;
        if (b->nodes[j].match >= 0 || b->nodes[j].nin == 0)
            continue;
        char *k = node_key(&t, b, a, false, &b->nodes[j], &ok);
        int *i = ok ? strmap_get(&keys, k) : NULL;
        if (!i || *i < 0)
            continue;
        if (!strmap_put(&seen, k, j)) {
            cand[*strmap_get(&seen, k)] = -1;
            *i = -1;
            continue;
        }
        cand[j] = *i;
    }
    int made = 0;
    for (int j = 0; j < b->n; j++) {
        int i = cand[j];
        if (i < 0 || a->nodes[i].match >= 0)
            continue;
        pair(a, b, i, j, true);
        made++;
        /* its unmatched leaves, slot by slot */
        for (int q = 0; q < b->nodes[j].nin && q < a->nodes[i].nin; q++) {
            DNode *x = &a->nodes[a->nodes[i].in[q]], *y = &b->nodes[b->nodes[j].in[q]];
            if (x->match < 0 && y->match < 0 && x->nin == 0 && y->nin == 0)
                pair(a, b, a->nodes[i].in[q], b->nodes[j].in[q], true);
        }
    }
    free(cand);
    strmap_free(&seen);
    strmap_free(&keys);
    arena_free(&t);
    return made;
}

static void match_nodes(Side *a, Side *b)
{
    for (int i = 0; i < a->n; i++) {
        int *j = strmap_get(&b->byname, a->nodes[i].name);
        if (j)
            pair(a, b, i, *j, false);
    }
    while (match_round(a, b) > 0)
        ; /* to a fixed point */
}

/* ---- the differences ------------------------------------------------------------ */

typedef struct {
    const char *name, *a, *b; /* a change: the node (or fact), before, after */
} Change;

typedef struct {
    Vec changes[C_COUNT]; /* Change */
    bool totals[C_COUNT];
    char ta[C_COUNT][48], tb[C_COUNT][48]; /* totals, as text */
    Arena a;
} Diff;

static void change(Diff *d, int cls, const char *name, const char *a, const char *b)
{
    Change *c = vec_push(&d->changes[cls], sizeof(Change));
    c->name = name;
    c->a = a ? arena_strdup(&d->a, a) : NULL;
    c->b = b ? arena_strdup(&d->a, b) : NULL;
}

static void total(Diff *d, int cls, double a, double b)
{
    d->totals[cls] = true;
    json_number_text(a, d->ta[cls], sizeof d->ta[cls]);
    json_number_text(b, d->tb[cls], sizeof d->tb[cls]);
}

static bool is_cast(const DNode *n) { return !strcmp(n->op, "Cast") || !strcmp(n->op, "amp_cast"); }
static bool is_fused(const DNode *n) { return op_made_by_fuse(op_lookup(n->op)); }
static int node_class(const DNode *n)
{
    return is_cast(n) ? C_CASTS : is_fused(n) ? C_FUSIONS : C_NODES;
}

static char *what(Arena *a, const DNode *n)
{
    return arena_printf(a, "%s %s%s", n->op, n->dtype, n->shape);
}

/* Whether absorbed="X" on A is absorbed="Y" on B: the same name, or X made
 * from a node B has renamed (relu1_bwd from relu1 -> act1: act1_bwd). */
static bool same_absorbed(const Side *a, const Side *b, const char *x, const char *y)
{
    if (strcmp(x, y) == 0)
        return true;
    if (strncmp(x, "absorbed=\"", 10) != 0 || strncmp(y, "absorbed=\"", 10) != 0)
        return false;
    x += 10, y += 10;
    char base[512];
    for (size_t k = strlen(x); k > 0; k--) {
        if (x[k] != '_' && x[k] != '"' && x[k] != 0)
            continue;
        if (k >= sizeof base)
            continue;
        memcpy(base, x, k);
        base[k] = 0;
        int *i = strmap_get(&a->byname, base);
        const DNode *n = i ? &a->nodes[*i] : NULL;
        if (n && n->renamed) {
            const char *to = b->nodes[n->match].name;
            return strncmp(y, to, strlen(to)) == 0 && strcmp(y + strlen(to), x + k) == 0;
        }
    }
    return false;
}

/* The attributes that differ (one op: the same list): "num_filter=32" ->
 * "num_filter=48". */
static void attrs_change(Diff *d, const Side *a, const Side *b, const DNode *x, const DNode *y)
{
    char *ta = arena_strdup(&d->a, ""), *tb = ta;
    for (int k = 0; k < x->nattr && k < y->nattr; k++)
        if (!same_absorbed(a, b, x->attr[k], y->attr[k])) {
            ta = arena_printf(&d->a, "%s%s%s", ta, *ta ? ", " : "", x->attr[k]);
            tb = arena_printf(&d->a, "%s%s%s", tb, *tb ? ", " : "", y->attr[k]);
        }
    if (*ta || *tb)
        change(d, C_ATTRS, y->name, ta, tb);
}

/* A's node i, past the casts only A has (a cast added or removed is the
 * casts class's; its readers' inputs are not a change of theirs) */
static int through_casts(const Side *a, int i)
{
    while (a->nodes[i].match < 0 && is_cast(&a->nodes[i]) && a->nodes[i].nin == 1)
        i = a->nodes[i].in[0];
    return i;
}

/* B's node j the same way, as A's node (-1: unmatched) */
static int through_casts_b(const Side *a, const Side *b, int j)
{
    while (b->nodes[j].match < 0 && is_cast(&b->nodes[j]) && b->nodes[j].nin == 1)
        j = b->nodes[j].in[0];
    return b->nodes[j].match >= 0 ? through_casts(a, b->nodes[j].match) : -1 - j;
}

/* The inputs that differ, slot by slot ("relu1 -> dropout1"), or both
 * lists when the counts differ. */
static void inputs_change(Diff *d, const Side *a, const Side *b, const DNode *x, const DNode *y)
{
    char *ta = arena_strdup(&d->a, ""), *tb = ta;
    for (int k = 0; k < x->nin || k < y->nin; k++) {
        bool differs = x->nin != y->nin || k >= x->nin || k >= y->nin ||
                       through_casts(a, x->in[k]) != through_casts_b(a, b, y->in[k]);
        if (k < x->nin && differs)
            ta = arena_printf(&d->a, "%s%s%s", ta, *ta ? "," : "", a->nodes[x->in[k]].name);
        if (k < y->nin && differs)
            tb = arena_printf(&d->a, "%s%s%s", tb, *tb ? "," : "", b->nodes[y->in[k]].name);
    }
    change(d, C_INPUTS, y->name, ta, tb);
}

static void compare_nodes(Diff *d, const Side *a, const Side *b)
{
    for (int i = 0; i < a->n; i++)
        if (a->nodes[i].match < 0)
            change(d, node_class(&a->nodes[i]), a->nodes[i].name, what(&d->a, &a->nodes[i]), NULL);
    for (int j = 0; j < b->n; j++) {
        const DNode *y = &b->nodes[j];
        if (y->match < 0) {
            change(d, node_class(y), y->name, NULL, what(&d->a, y));
            continue;
        }
        const DNode *x = &a->nodes[y->match];
        if (y->renamed)
            change(d, C_RENAMES, y->name, x->name, y->name);
        if (strcmp(x->op, y->op) != 0)
            change(d, C_NODES, y->name, x->op, y->op);
        if (strcmp(x->dtype, y->dtype) != 0)
            change(d, C_DTYPES, y->name, x->dtype, y->dtype);
        if (strcmp(x->shape, y->shape) != 0)
            change(d, C_SHAPES, y->name, x->shape, y->shape);
        if (strcmp(x->layout, y->layout) != 0)
            change(d, C_LAYOUTS, y->name, x->layout, y->layout);
        if (strcmp(x->op, y->op) == 0 && strcmp(x->attrs, y->attrs) != 0)
            attrs_change(d, a, b, x, y);
        bool same = x->nin == y->nin;
        for (int k = 0; same && k < x->nin; k++)
            same = through_casts(a, x->in[k]) == through_casts_b(a, b, y->in[k]);
        if (!same)
            inputs_change(d, a, b, x, y);
    }
}

static const Fact *fact(const Side *s, const char *key)
{
    for (int i = 0; i < s->nfacts; i++)
        if (strcmp(s->facts[i].key, key) == 0)
            return &s->facts[i];
    return NULL;
}

static int fact_class(const char *key)
{
    static const struct {
        const char *prefix;
        int cls;
    } m[] = {{"nodes", C_NODES},      {"casts", C_CASTS},      {"params.", C_PARAMS},
             {"fusions.", C_FUSIONS}, {"memplan.", C_MEMPLAN}, {"placement.", C_PLACEMENT},
             {"train.", C_TRAIN}};
    for (int i = 0; i < (int)(sizeof m / sizeof m[0]); i++)
        if (strncmp(key, m[i].prefix, strlen(m[i].prefix)) == 0)
            return m[i].cls;
    return -1;
}

/* Facts both sides have; the node count, casts and fusions give totals. */
static void compare_facts(Diff *d, const Side *a, const Side *b)
{
    bool graphs = a->has_graph && b->has_graph; /* the train settings come with a graph */
    for (int i = 0; i < a->nfacts; i++) {
        const Fact *x = &a->facts[i], *y = fact(b, x->key);
        int cls = fact_class(x->key);
        if (!y || cls < 0)
            continue;
        bool totals = cls == C_NODES || cls == C_CASTS;
        if (totals && x->is_num && y->is_num)
            total(d, cls, x->num, y->num);
        if (!totals && strcmp(x->text, y->text) != 0)
            change(d, cls, x->key, x->text, y->text);
    }
    for (int i = 0; graphs && i < b->nfacts; i++) /* a setting only B has */
        if (fact_class(b->facts[i].key) == C_TRAIN && !fact(a, b->facts[i].key))
            change(d, C_TRAIN, b->facts[i].key, NULL, b->facts[i].text);
    for (int i = 0; graphs && i < a->nfacts; i++)
        if (fact_class(a->facts[i].key) == C_TRAIN && !fact(b, a->facts[i].key))
            change(d, C_TRAIN, a->facts[i].key, a->facts[i].text, NULL);
}

static bool class_differs(const Diff *d, int c)
{
    return d->changes[c].len > 0 || (d->totals[c] && strcmp(d->ta[c], d->tb[c]) != 0);
}

/* ---- printing ------------------------------------------------------------------- */

enum { TEXT_ITEMS = 6 }; /* details per line; --format=json lists all */

static void print_change(FILE *f, int cls, const Change *c)
{
    if (cls == C_RENAMES)
        fprintf(f, "%s -> %s", c->a, c->b);
    else if (!c->a)
        fprintf(f, "+%s (%s)", c->name, c->b);
    else if (!c->b)
        fprintf(f, "-%s (%s)", c->name, c->a);
    else if (cls == C_ATTRS)
        fprintf(f, "%s {%s} -> {%s}", c->name, c->a, c->b);
    else if (strchr(c->name, '.') && fact_class(c->name) == cls) {
        /* a fact: "per_sample_bytes 46274496 -> 46276544 (+2048)" */
        char *e1, *e2;
        double x = strtod(c->a, &e1), y = strtod(c->b, &e2);
        fprintf(f, "%s %s -> %s", strchr(c->name, '.') + 1, c->a, c->b);
        if (!*e1 && !*e2 && e1 != c->a && e2 != c->b)
            fprintf(f, " (%+.0f)", y - x);
    } else {
        fprintf(f, "%s %s -> %s", c->name, c->a, c->b);
    }
}

static void print_text(FILE *f, const Diff *d, const DiffOpts *o)
{
    for (int c = 0; c < C_COUNT; c++) {
        if ((o->ignore >> c & 1) || !class_differs(d, c))
            continue;
        fprintf(f, "%s:", class_names[c]);
        if (d->totals[c]) {
            double ta = strtod(d->ta[c], NULL), tb = strtod(d->tb[c], NULL);
            fprintf(f, " %s -> %s (%+.0f)", d->ta[c], d->tb[c], tb - ta);
        }
        const Vec *v = &d->changes[c];
        for (int i = 0; i < v->len && i < TEXT_ITEMS; i++) {
            fputs(i ? ", " : d->totals[c] ? "; " : " ", f);
            print_change(f, c, &VEC_AT(*v, Change, i));
        }
        if (v->len > TEXT_ITEMS)
            fprintf(f, " ... and %d more", v->len - TEXT_ITEMS);
        fputc('\n', f);
    }
}

static void side_json(JsonW *w, const char *k, const Side *s)
{
    jw_object_inline(w, k);
    jw_str(w, "source", s->path);
    jw_str(w, "kind", s->kind);
    jw_str(w, "model", s->model);
    jw_str(w, "after", s->has_graph ? s->after : NULL);
    jw_end_object(w);
}

static void print_json(FILE *f, const Diff *d, const DiffOpts *o, const Side *a, const Side *b,
                       const Provenance *prov, bool differ)
{
    JsonW w;
    jw_init(&w, f);
    jw_object(&w, NULL);
    jw_str(&w, "schema", DIFF_SCHEMA);
    provenance_json(&w, prov);
    side_json(&w, "a", a);
    side_json(&w, "b", b);
    jw_bool(&w, "equal", !differ);
    jw_array(&w, "classes");
    for (int c = 0; c < C_COUNT; c++) {
        if ((o->ignore >> c & 1) || !class_differs(d, c))
            continue;
        jw_object(&w, NULL);
        jw_str(&w, "class", class_names[c]);
        if (d->totals[c]) {
            jw_num(&w, "a", strtod(d->ta[c], NULL));
            jw_num(&w, "b", strtod(d->tb[c], NULL));
        } else {
            jw_null(&w, "a");
            jw_null(&w, "b");
        }
        jw_array(&w, "changes");
        for (int i = 0; i < d->changes[c].len; i++) {
            const Change *x = &VEC_AT(d->changes[c], Change, i);
            jw_object_inline(&w, NULL);
            jw_str(&w, "name", x->name);
            jw_str(&w, "a", x->a);
            jw_str(&w, "b", x->b);
            jw_end_object(&w);
        }
        jw_end_array(&w);
        jw_end_object(&w);
    }
    jw_end_array(&w);
    jw_end_object(&w);
}

/* ---- the command ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fputs("usage: ampc diff A B [options] [ampc flags for both model files]\n"
          "\n"
          "Compares two compilations: model files (compiled with the flags given), text dumps\n"
          "or JSON documents (--dump-format=json, --report=json), in any mix.  Exit 0 when\n"
          "they agree, 1 when they differ, 2 on an error (docs/ci.md).\n"
          "\n"
          "options:\n"
          "  --a-flags='FLAGS'       more ampc flags for A only (split on blanks), as\n"
          "  --b-flags='FLAGS'       --b-flags for B\n"
          "  --ignore=CLASS,...      leave these classes out: nodes renames casts fusions\n"
          "                          dtypes shapes layouts attrs inputs params memplan\n"
          "                          placement train provenance\n"
          "  --format=text|json      one line per class, totals first (default), or an\n"
          "                          ampc-diff document (docs/schema/diff.schema.json)\n"
          "  --compare-provenance    compare how A and B were made too (ignored by default)\n"
          "  --help\n",
          f);
}

static int parse_ignore(const char *list, unsigned *out)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        int c = 0;
        while (c < C_COUNT && strcmp(class_names[c], t) != 0)
            c++;
        if (c == C_COUNT)
            return fail("--ignore: unknown class '%s' (see ampc diff --help)", t);
        *out |= 1u << c;
    }
    return 0;
}

/* Whether a flag may go to the compiles: none that writes a file or
 * prints what diff reads (the child's output is diff's). */
static bool compile_flag(const char *s)
{
    static const char *const refused[] = {"-o",
                                          "-S",
                                          "--emit-",
                                          "--dump",
                                          "--report",
                                          "--expect",
                                          "--check-program",
                                          "--from-",
                                          "--explain",
                                          "--time-passes",
                                          "--help",
                                          "--version"};
    for (int i = 0; i < (int)(sizeof refused / sizeof refused[0]); i++)
        if (strncmp(s, refused[i], strlen(refused[i])) == 0)
            return false;
    return true;
}

static int parse_args(int argc, char **argv, DiffOpts *o, const char **in)
{
    int nin = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0) {
            usage(stdout);
            return -1;
        } else if (strncmp(s, "--a-flags=", 10) == 0) {
            o->aflags = s + 10;
        } else if (strncmp(s, "--b-flags=", 10) == 0) {
            o->bflags = s + 10;
        } else if (strncmp(s, "--ignore=", 9) == 0) {
            if (parse_ignore(s + 9, &o->ignore))
                return 2;
        } else if (strncmp(s, "--format=", 9) == 0) {
            if (strcmp(s + 9, "text") && strcmp(s + 9, "json"))
                return fail("--format must be text or json, not '%s'", s + 9);
            o->json = strcmp(s + 9, "json") == 0;
        } else if (strcmp(s, "--compare-provenance") == 0) {
            o->provenance = true;
        } else if (s[0] == '-' && s[1]) {
            if (!compile_flag(s))
                return fail("%s: ampc diff compiles model files itself, and writes nothing but its "
                            "result",
                            s);
            if (o->ncommon == (int)(sizeof o->common / sizeof o->common[0]))
                return fail("too many flags");
            o->common[o->ncommon++] = s; /* for compiling the model files */
        } else if (nin == 2) {
            return fail("more than two inputs ('%s', '%s' and '%s')", in[0], in[1], s);
        } else {
            in[nin++] = s;
        }
    }
    if (nin != 2)
        return fail("two inputs are compared (see ampc diff --help)");
    return 0;
}

int diff_main(int argc, char **argv, const char *argv0)
{
    DiffOpts o = {.self = argv0};
    const char *in[2];
    int rc = parse_args(argc, argv, &o, in);
    if (rc)
        return rc < 0 ? 0 : rc;
    /* the child is this very ampc, whatever the caller's PATH */
    static char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        o.self = self;
    }
    Side a = {0}, b = {0};
    rc = load_side(&o, &a, in[0], o.aflags);
    if (!rc)
        rc = load_side(&o, &b, in[1], o.bflags);
    if (!rc && a.has_graph != b.has_graph && !(a.has_report && b.has_report))
        rc =
            fail("'%s' holds %s and '%s' %s: nothing to compare", in[0],
                 a.has_graph ? "a graph" : "a report", in[1], b.has_graph ? "a graph" : "a report");
    if (rc) {
        side_free(&a);
        side_free(&b);
        return rc;
    }
    Diff d = {0};
    arena_init(&d.a);
    if (a.has_graph && b.has_graph) {
        match_nodes(&a, &b);
        compare_nodes(&d, &a, &b);
    }
    compare_facts(&d, &a, &b);
    if (o.provenance && (a.prov || b.prov) && (!a.prov || !b.prov || strcmp(a.prov, b.prov) != 0))
        change(&d, C_PROVENANCE, "provenance", a.prov, b.prov);
    bool differ = false;
    for (int c = 0; c < C_COUNT; c++)
        differ |= !(o.ignore >> c & 1) && class_differs(&d, c);
    Provenance prov = {.input_kind = "diff"};
    for (int i = 0; i < o.ncommon; i++)
        if (strncmp(o.common[i], "--", 2) == 0) {
            char flag[128];
            const char *eq = strchr(o.common[i], '=');
            snprintf(flag, sizeof flag, "%.*s",
                     (int)((eq ? eq : o.common[i] + strlen(o.common[i])) - o.common[i] - 2),
                     o.common[i] + 2);
            provenance_note(&prov, flag, eq ? eq + 1 : NULL);
        }
    if (o.json)
        print_json(stdout, &d, &o, &a, &b, &prov, differ);
    else
        print_text(stdout, &d, &o);
    for (int c = 0; c < C_COUNT; c++)
        vec_free(&d.changes[c]);
    arena_free(&d.a);
    side_free(&a);
    side_free(&b);
    return differ ? 1 : 0;
}
