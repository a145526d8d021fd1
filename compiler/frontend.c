/* frontend.c - the front end as one call: load and parse (grammar/), then
 * elaborate (passes/), and the list of passes that follow. */
#include "driver.h"

#include <stdlib.h>
#include <string.h>

static bool run_infer_shapes(Graph **g, const PassOptions *o) { (void)o; return infer_shapes(*g); }
static bool run_infer_types(Graph **g, const PassOptions *o) { (void)o; return infer_types(*g); }
static bool run_cast_elide(Graph **g, const PassOptions *o) { (void)o; return cast_elide(g); }
static bool run_autodiff(Graph **g, const PassOptions *o) { (void)o; return autodiff(g); }
/* the training graph and the inference graph */
static bool run_train_cast_elide(Graph **g, const PassOptions *o)
{
    (void)o;
    Graph *infer = (*g)->infer;
    (*g)->infer = NULL;
    bool ok = cast_elide(g) && (!infer || cast_elide(&infer));
    (*g)->infer = infer;
    return ok;
}

static void print_explain(const Graph *g, const PassOptions *o)
{
    int *order = graph_canonical_order(g);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[order[i]];
        if (!g->why[n->id] || (o->explain_name && strcmp(o->explain_name, n->name) != 0))
            continue;
        fprintf(o->out ? o->out : stdout, "%-40s %s\n", n->name, g->why[n->id]);
    }
    free(order);
}

static bool run_amp(Graph **g, const PassOptions *o)
{
    AmpOptions ao;
    if (!train_setting_ok(*g, "optimizer") || !train_setting_ok(*g, "loss_scale") ||
        !amp_options_resolve(*g, o, &ao))
        return false;
    if (o && o->explain_name && !graph_find(*g, o->explain_name)) {
        diag_plain_error((*g)->diag, "--explain: no node named '%s'", o->explain_name);
        return false;
    }
    if (!amp(g, &ao))
        return false;
    if (ao.explain)
        print_explain(*g, o);
    return true;
}

const PassDesc pass_pipeline[] = {
    {"elaborate", NULL},
    {"infer-shapes", run_infer_shapes},
    {"infer-types", run_infer_types},
    {"amp", run_amp},
    {"cast-elide", run_cast_elide},
    {"autodiff", run_autodiff},
    {"train-cast-elide", run_train_cast_elide},
};
const int pass_count = (int)(sizeof pass_pipeline / sizeof pass_pipeline[0]);

int pass_index(const char *name)
{
    for (int i = 0; i < pass_count; i++)
        if (strcmp(pass_pipeline[i].name, name) == 0)
            return i;
    return -1;
}

Graph *frontend_elaborate(Diag *d, const char *path, const char *text, size_t len,
                          const ElabOptions *opt)
{
    Arena ast;
    arena_init(&ast);
    AstProgram prog = {0};
    Graph *g = NULL;
    if (ast_load(&ast, d, path, text, len, &prog))
        g = elaborate(&prog, d, opt);
    arena_free(&ast);
    return g;
}

Graph *frontend_compile(Diag *d, const char *path, const char *text, size_t len,
                        const PassOptions *o)
{
    static const PassOptions defaults = {0};
    Graph *g = frontend_elaborate(d, path, text, len, NULL);
    for (int i = 1; g && i < pass_count; i++)
        if (!pass_pipeline[i].run(&g, o ? o : &defaults)) {
            graph_free(g);
            g = NULL;
        }
    return g;
}

static const ConfigEntry *train_entry(const Graph *g, const char *key)
{
    for (int i = 0; i < g->ntrain; i++)
        if (strcmp(g->train[i].key, key) == 0)
            return &g->train[i];
    return NULL;
}

static DType amp_target(const char *s)
{
    if (strcmp(s, "float16") == 0 || strcmp(s, "fp16") == 0)
        return DT_F16;
    if (strcmp(s, "bfloat16") == 0 || strcmp(s, "bf16") == 0)
        return DT_BF16;
    return DT_COUNT;
}

bool amp_options_resolve(const Graph *g, const PassOptions *po, AmpOptions *out)
{
    static const PassOptions none = {0};
    if (!po)
        po = &none;
    *out = (AmpOptions){.fp16_ops = po->amp_fp16, .fp32_ops = po->amp_fp32,
                        .exclude = po->amp_exclude, .explain = po->explain};
    const ConfigEntry *e = train_entry(g, "amp");
    if (po->amp) {
        out->target = strcmp(po->amp, "off") == 0 ? DT_UNKNOWN : amp_target(po->amp);
        if (out->target == DT_COUNT) {
            diag_plain_error(g->diag, "--amp must be off, float16 or bfloat16, not '%s'", po->amp);
            return false;
        }
    } else if (e) {
        const ConfigVal *v = e->val;
        DType t = v->kind == CV_SYM ? (strcmp(v->s, "off") == 0 ? DT_UNKNOWN : amp_target(v->s))
                                    : DT_COUNT;
        if (t == DT_COUNT) {
            diag_error(g->diag, e->loc, "amp must be off, float16 or bfloat16");
            return false;
        }
        out->target = t;
    }
    /* optimizer = sgd(..., multi_precision=true) */
    const ConfigEntry *opt = train_entry(g, "optimizer");
    if (opt && opt->val->kind == CV_CALL)
        for (int i = 0; i < opt->val->nargs; i++)
            if (opt->val->argnames[i] && strcmp(opt->val->argnames[i], "multi_precision") == 0) {
                if (opt->val->args[i]->kind != CV_BOOL) {
                    diag_error(g->diag, opt->loc, "multi_precision must be true or false");
                    return false;
                }
                out->multi_precision = opt->val->args[i]->b;
            }
    return true;
}

static bool is_call_or_sym(const ConfigVal *v, const char *const *names)
{
    if (v->kind != CV_SYM && v->kind != CV_CALL)
        return false;
    for (; *names; names++)
        if (strcmp(v->s, *names) == 0)
            return true;
    return false;
}

bool train_setting_ok(const Graph *g, const char *key)
{
    const ConfigEntry *e = train_entry(g, key);
    if (!e)
        return true;
    static const char *const optimizers[] = {"sgd", "nag", "adam", NULL};
    static const char *const scales[] = {"dynamic", "off", NULL};
    const ConfigVal *v = e->val;
    bool ok = true;
    const char *want = "";
    if (strcmp(key, "optimizer") == 0) {
        ok = is_call_or_sym(v, optimizers);
        want = "sgd(...), nag(...) or adam(...)";
    } else if (strcmp(key, "loss_scale") == 0) {
        ok = is_call_or_sym(v, scales) || ((v->kind == CV_INT || v->kind == CV_FLOAT) &&
                                           (v->kind == CV_INT ? v->i > 0 : v->f > 0));
        want = "dynamic, dynamic(init=..., growth=..., backoff=..., interval=..., min=..., max=...), "
               "off or a positive number";
    }
    if (ok)
        return true;
    if (e->loc.file >= 0)
        diag_error(g->diag, e->loc, "%s must be %s", key, want);
    else
        diag_plain_error(g->diag, "%s must be %s", key, want);
    return false;
}
