/* frontend.c - the front end as one call: load and parse (grammar/), then
 * elaborate (passes/), and the list of passes that follow. */
#include "driver.h"
#include "../runtime/settings.h"

#include <stdlib.h>
#include <string.h>

static bool run_infer_shapes(Graph **g, const PassOptions *o) { (void)o; return infer_shapes(*g); }
/* With AMP on, infer-types leaves mixed dtypes to the amp pass's casts. */
static bool run_infer_types(Graph **g, const PassOptions *o)
{
    AmpOptions ao;
    if (!amp_options_resolve(*g, o, &ao))
        return false;
    (*g)->info.amp = ao.target;
    return infer_types(*g);
}
/* a model without a loss head compiled to a program: it only predicts */
static bool run_autodiff(Graph **g, const PassOptions *o)
{
    return o->predict ? autodiff_predict(g) : autodiff(g);
}
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

/* --explain=NAME for a node of the training step that the forward graph
 * lacks (print_explain left it here): what made it, or an error when no
 * graph has it.  The inference graph holds the forward graph's nodes. */
static const char *explain_dtype(DType t) /* as amp.c's lines spell them */
{
    return t == DT_F16 ? "fp16" : t == DT_BF16 ? "bf16" : t == DT_F32 ? "fp32" : dtype_short(t);
}

static bool explain_training_node(const Graph *g, const PassOptions *o)
{
    const char *name = o->explain_name;
    const Node *n = graph_find(g, name);
    if (!n && !(g->infer && graph_find(g->infer, name))) {
        diag_plain_error(g->diag, "--explain: no node named '%s' (see --dump=fuse for names)",
                         name);
        return false;
    }
    FILE *out = o->out ? o->out : stdout;
    if (n && op_made_by_autodiff(n->op))
        fprintf(out, "%-40s %s: made by autodiff, in the dtype of the gradient it computes\n",
                n->name, explain_dtype(n->dtype));
    else if (n && n->op == OP_amp_cast && !(g->infer && graph_find(g->infer, name)))
        fprintf(out, "%-40s %s: a cast of a gradient that train-cast-elide keeps\n", n->name,
                explain_dtype(n->dtype));
    return true;
}

static bool run_fuse(Graph **g, const PassOptions *o)
{
    if (o->explain && o->explain_name && !explain_training_node(*g, o))
        return false;
    FuseOptions fo = {.disabled = o->no_fuse, .enabled = o->fuse, .warn = true,
                      .explain = o->explain, .explain_name = o->explain_name, .out = o->out,
                      .target = o->target};
    return fuse(g, &fo);
}

/* --explain's "(SOURCE -> READERS)" for casts and parameters, from the final
 * graph: the reader with the smallest name (independent of storage order),
 * "the output", and how many more. */
static void print_flow(FILE *out, const Graph *g, const Node *n, const int *count,
                       const char **first)
{
    bool cast = n->op == OP_Cast || n->op == OP_amp_cast || n->op == OP_param_master;
    if (!cast && n->op != OP_Param)
        return;
    fprintf(out, " (%s%s-> ", cast ? g->nodes[n->in[0]]->name : "", cast ? " " : "");
    int c = count[n->id];
    fputs(first[n->id] ? first[n->id] : c ? "the output" : "nothing", out);
    if (c > 1)
        fprintf(out, " and %d more", c - 1);
    fputc(')', out);
}

/* --explain: why each node of the final forward graph (after cast-elide)
 * has its dtype; --explain=NAME also answers for a node cast-elide removed,
 * and, when the training passes run, leaves a name the forward graph lacks
 * to explain_training_node (a backward node). */
static bool print_explain(const Graph *g, const PassOptions *o)
{
    FILE *out = o->out ? o->out : stdout;
    const char *name = o->explain_name;
    if (name && !graph_find(g, name)) {
        for (int i = 0; i < g->nelided; i++)
            if (strcmp(g->elided[i].name, name) == 0) {
                fprintf(out, "%-40s %s\n", name, g->elided[i].why);
                return true;
            }
        if (o->explain_training)
            return true;
        diag_plain_error(g->diag, "--explain: no node named '%s' (see --dump=cast-elide for names)",
                         name);
        return false;
    }
    int *count = calloc((size_t)g->nnodes + 1, sizeof(int));
    const char **first = calloc((size_t)g->nnodes + 1, sizeof(char *));
    if (!count || !first)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++) {
            int v = g->nodes[i]->in[j];
            if (j && g->nodes[i]->in[j - 1] == v)
                continue; /* one reader, read twice */
            count[v]++;
            if (!first[v] || strcmp(g->nodes[i]->name, first[v]) < 0)
                first[v] = g->nodes[i]->name;
        }
    for (int i = 0; i < g->noutputs; i++)
        count[g->outputs[i]]++;
    int *order = graph_canonical_order(g);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[order[i]];
        if (!g->why[n->id] || (name && strcmp(name, n->name) != 0))
            continue;
        fprintf(out, "%-40s %s", n->name, g->why[n->id]);
        print_flow(out, g, n, count, first);
        fputc('\n', out);
    }
    free(order);
    free(count);
    free(first);
    return true;
}

static bool run_cast_elide(Graph **g, const PassOptions *o)
{
    return cast_elide(g) && (!o->explain || !(*g)->why || print_explain(*g, o));
}

static bool run_amp(Graph **g, const PassOptions *o)
{
    AmpOptions ao;
    if (!train_setting_ok(*g, "optimizer") || !train_setting_ok(*g, "loss_scale") ||
        !amp_options_resolve(*g, o, &ao))
        return false;
    return amp(g, &ao);
}

static bool run_schedule(Graph **g, const PassOptions *o)
{
    return schedule(g, o->target, !o->no_schedule);
}

const PassDesc pass_pipeline[] = {
    {"elaborate", NULL, NULL},
    {"infer-shapes", run_infer_shapes, NULL},
    {"infer-types", run_infer_types, NULL},
    {"amp", run_amp, NULL},
    {"cast-elide", run_cast_elide, NULL},
    {"autodiff", run_autodiff, NULL},
    {"train-cast-elide", run_train_cast_elide, NULL},
    {"fuse", run_fuse, NULL},
    {"schedule", run_schedule, NULL},
    /* the stages (stages.c): on the scheduled training graph */
    {"memplan", NULL, stage_memplan},
    {"program", NULL, stage_program},
    {"gpu-cost", NULL, stage_gpucost},
    {"kvstore", NULL, stage_kvstore},
};
const int stage_count = (int)(sizeof pass_pipeline / sizeof pass_pipeline[0]);
const int pass_count =
    (int)(sizeof pass_pipeline / sizeof pass_pipeline[0]) - 4; /* not the stages */

int pass_index(const char *name)
{
    for (int i = 0; i < stage_count; i++)
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
    /* a value the training program would refuse is refused here, at its entry */
    if (g && !train_settings_ok(g)) {
        graph_free(g);
        g = NULL;
    }
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

int frontend_dump_after(const SrcFile *f)
{
    const char *tag = "# ampc-ir 1: after ";
    size_t n = strlen(tag);
    if (f->len < n || strncmp(f->text, tag, n) != 0)
        return -1;
    for (int i = 0; i < pass_count; i++) {
        size_t k = strlen(pass_pipeline[i].name);
        if (strncmp(f->text + n, pass_pipeline[i].name, k) == 0 &&
            (f->text[n + k] == '\n' || f->text[n + k] == '\r' || f->text[n + k] == 0))
            return i;
    }
    return -1;
}

/* A banner promises what the passes before it did, and later passes (and
 * the program) rely on it: hold the file to the shape and type rules of
 * every node (before amp, with AMP on, dtypes may disagree as infer-types
 * lets them), and a training graph to what autodiff derives from its
 * forward part. */
bool frontend_check_dump(Graph *g, int after, const PassOptions *o)
{
    AmpOptions ao;
    if (after < pass_index("amp")) {
        if (!amp_options_resolve(g, o, &ao))
            return false;
        g->info.amp = ao.target;
    }
    if (!ir_check_rules(g, pass_pipeline[after].name))
        return false;
    return after < pass_index("autodiff") || training_graph_check(g, after);
}

bool training_graph_check(const Graph *g, int after)
{
    if (g->info.predict_only) /* no training graph to derive again */
        return true;
    if (after >= pass_index("schedule")) { /* the fuse pass's graph, before the layouts */
        Graph *s = layout_strip(g);
        bool ok = fuse_check(s);
        graph_free(s);
        return ok;
    }
    return after >= pass_index("fuse") ? fuse_check(g)
                                        : autodiff_check(g, after > pass_index("autodiff"));
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
    if (po->amp_placement && strcmp(po->amp_placement, "greedy") == 0) {
        out->placement = AMP_PLACE_GREEDY;
    } else if (po->amp_placement && strcmp(po->amp_placement, "optimal") != 0) {
        diag_plain_error(g->diag, "--amp-placement must be optimal or greedy, not '%s'",
                         po->amp_placement);
        return false;
    }
    const ConfigEntry *e = train_entry(g, "amp");
    if (po->amp) {
        out->target = strcmp(po->amp, "off") == 0 ? DT_UNKNOWN : amp_target(po->amp);
        if (out->target == DT_COUNT) {
            diag_plain_error(g->diag,
                             "--amp must be off, float16 (or fp16) or bfloat16 (or bf16), not '%s'",
                             po->amp);
            return false;
        }
    } else if (e) {
        const ConfigVal *v = e->val;
        DType t = v->kind == CV_SYM ? (strcmp(v->s, "off") == 0 ? DT_UNKNOWN : amp_target(v->s))
                                    : DT_COUNT;
        if (t == DT_COUNT) {
            diag_error(g->diag, e->loc, "amp must be off, float16 (or fp16) or bfloat16 (or bf16)");
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

/* The text the program's train_defaults hold for v: codegen/emit_c.c writes
 * config_print's form, so the program parses exactly this. */
static char *config_text(const ConfigVal *v)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        DIE("out of memory");
    config_print(m, v);
    if (fclose(m) != 0 || !text)
        DIE("out of memory");
    return text;
}

/* Applies one value to o with the program's own parser (runtime/settings.c).
 * False with a message in err: an unknown key or a value the program would
 * refuse. */
static bool setting_apply_keep(RtTrainOptions *o, const char *key, const ConfigVal *v,
                               char **keep, char *err, size_t errlen)
{
    const RtSetting *s = rt_setting_by_key(key);
    if (!s) {
        snprintf(err, errlen, "unknown train setting '%s'", key);
        return false;
    }
    char *text = config_text(v);
    bool ok = rt_setting_apply(o, s, text, RT_FROM_TRAIN, err, errlen);
    if (keep)
        *keep = text; /* o may point into it (data, init): the caller frees it after o */
    else
        free(text); /* o is thrown away unread */
    return ok;
}

static bool setting_apply(RtTrainOptions *o, const char *key, const ConfigVal *v, char *err,
                          size_t errlen)
{
    return setting_apply_keep(o, key, v, NULL, err, errlen);
}

/* msg as it is when it names the key already, else after "train setting 'KEY': ". */
static void report_setting(const Graph *g, const ConfigEntry *e, const char *msg)
{
    bool whole = !rt_setting_by_key(e->key) || strncmp(msg, "train setting", 13) == 0;
    const char *pre = whole ? "" : "train setting '", *key = whole ? "" : e->key,
               *post = whole ? "" : "': ";
    if (e->loc.file >= 0)
        diag_error(g->diag, e->loc, "%s%s%s%s", pre, key, post, msg);
    else
        diag_plain_error(g->diag, "%s%s%s%s", pre, key, post, msg);
}

bool train_settings_ok(const Graph *g)
{
    RtTrainOptions o;
    rt_train_options_default(&o);
    bool ok = true;
    char msg[1024];
    for (int i = 0; i < g->ntrain; i++) {
        const ConfigEntry *e = &g->train[i];
        for (int j = 0; j < i; j++)
            if (strcmp(g->train[j].key, e->key) == 0) {
                char twice[256];
                snprintf(twice, sizeof twice, "train setting '%s' given twice", e->key);
                report_setting(g, e, twice);
                ok = false;
            }
        if (!setting_apply(&o, e->key, e->val, msg, sizeof msg)) {
            report_setting(g, e, msg);
            ok = false;
        }
    }
    return ok;
}

bool train_setting_ok(const Graph *g, const char *key)
{
    const ConfigEntry *e = train_entry(g, key);
    RtTrainOptions o;
    rt_train_options_default(&o);
    char msg[1024];
    if (!e || setting_apply(&o, key, e->val, msg, sizeof msg))
        return true;
    report_setting(g, e, msg);
    return false;
}

int train_optimizer_nstate(const Graph *g)
{
    RtTrainOptions o;
    rt_train_options_default(&o);
    char msg[1024];
    const ConfigEntry *e = train_entry(g, "optimizer");
    if (e && !setting_apply(&o, "optimizer", e->val, msg, sizeof msg))
        return 0;
    e = train_entry(g, "momentum");
    if (e && !setting_apply(&o, "momentum", e->val, msg, sizeof msg))
        return 0;
    /* runtime/cpu/optim.c: Adam keeps mean and var, SGD and NAG a momentum
     * unless it is 0 */
    return o.optimizer == RT_OPT_ADAM ? 2 : o.momentum != 0.0f ? 1 : 0;
}

bool train_loss_scale_dynamic(const Graph *g)
{
    RtTrainOptions o;
    rt_train_options_default(&o);
    char msg[1024];
    const ConfigEntry *e = train_entry(g, "loss_scale");
    if (e && !setting_apply(&o, "loss_scale", e->val, msg, sizeof msg))
        return false;
    /* the name the program's RtModel.amp carries (codegen/emit_c.c) */
    const char *amp = g->info.amp ? dtype_long(g->info.amp) : "off";
    return rt_loss_scale_mode(&o.loss_scale, amp) == RT_LS_DYNAMIC;
}

const char *train_kvstore(const Graph *g)
{
    const ConfigEntry *e = train_entry(g, "kvstore");
    if (!e || (e->val->kind != CV_SYM && e->val->kind != CV_STR))
        return NULL;
    return e->val->s;
}

void train_gpu_options(const Graph *g, GcOptions *o)
{
    RtTrainOptions t;
    rt_train_options_default(&t);
    char msg[1024];
    for (int i = 0; i < g->ntrain; i++) /* checked already: a refused value changes nothing */
        (void)setting_apply(&t, g->train[i].key, g->train[i].val, msg, sizeof msg);
    o->nstate = train_optimizer_nstate(g);
    o->optimizer = (int)t.optimizer;
    o->dynamic = train_loss_scale_dynamic(g);
    o->log_interval = t.log_interval;
}

bool train_flag_ok(const Graph *g, const char *key, const ConfigVal *v, const char *flag)
{
    RtTrainOptions o;
    rt_train_options_default(&o);
    char msg[1024];
    if (setting_apply(&o, key, v, msg, sizeof msg))
        return true;
    diag_plain_error(g->diag, "%s: %s", flag, msg);
    return false;
}

/* The input the program feeds (codegen/emit_c.c: the first Input that is not a
 * label) and the loss head's classes, as ampc_model will say. */
static const Node *data_input(const Graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op == OP_Input && node_enum(n, INPUT_ROLE) != INPUT_LABEL)
            return n;
    }
    return NULL;
}

/* rt_settings_check on o and g's data input and classes; NULL when they fit. */
static const char *settings_misfit(const Graph *g, const RtTrainOptions *o, char *msg,
                                   size_t msglen)
{
    const Node *data = data_input(g);
    int64_t classes = 0;
    for (int i = 0; i < g->noutputs; i++) {
        const Node *h = g->nodes[g->outputs[i]];
        if (op_is_loss_head(h->op) && h->shape.rank == 2)
            classes = h->shape.d[1];
    }
    int rank = data && data->shape.rank > 0 ? data->shape.rank - 1 : 0;
    for (int k = 0; k < rank; k++)
        if (data->shape.d[k + 1] <= 0)
            return NULL; /* a symbolic dimension: the program checks what it gets */
    return rt_settings_check(o, g->model, rank, data ? data->shape.d + 1 : NULL, classes, msg,
                             msglen);
}

bool train_settings_fit(const Graph *g)
{
    RtTrainOptions o;
    rt_train_options_default(&o);
    char msg[1024];
    char **texts = calloc((size_t)g->ntrain + 1, sizeof *texts);
    if (!texts)
        DIE("out of memory");
    bool ok = true;
    for (int i = 0; ok && i < g->ntrain; i++)
        if (!setting_apply_keep(&o, g->train[i].key, g->train[i].val, &texts[i], msg,
                                sizeof msg)) {
            report_setting(g, &g->train[i], msg);
            ok = false;
        }
    const char *key = ok ? settings_misfit(g, &o, msg, sizeof msg) : NULL;
    for (int i = 0; i < g->ntrain; i++)
        free(texts[i]);
    free(texts);
    if (!ok || !key)
        return ok;
    const ConfigEntry *e = train_entry(g, key);
    if (e)
        report_setting(g, e, msg);
    else
        diag_plain_error(g->diag, "train setting '%s': %s", key, msg);
    return false;
}
