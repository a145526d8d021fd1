/* stages.c - the stages of the pass table after the graph passes: memplan
 * (both steps' buffer plans), program (the lowered program), gpu-cost (the
 * GPU cost model of the program, on a machine with devices) and kvstore
 * (the gradient placement, written into the program; on a GPU its compute
 * is the cost model's).  Each is an entry of
 * pass_pipeline (frontend.c) like a graph pass, so --dump=NAME, --dump=all
 * and --dump-dir cover them; what each makes stays in the Compilation for
 * the next stage, --report and the program ampc writes.
 *
 * Every artifact is proved before anything reads it: a plan or a program
 * the verifiers refuse is a compiler bug, never a program. */
#include "driver.h"
#include "../codegen/codegen.h"

#include <stdlib.h>
#include <string.h>

void compilation_free(Compilation *c)
{
    plan_free(&c->plan[0]);
    plan_free(&c->plan[1]);
    if (c->lowered)
        program_free(&c->prog);
    gpucost_free(&c->gpu);
    c->planned = c->lowered = c->placed = c->priced = false;
}

/* Whether the backend can lower g, asked without a word: --report alone
 * leaves out its placement for a model it cannot lower, as before. */
static bool can_lower_quietly(const Graph *g)
{
    Diag *d = g->diag;
    FILE *keep = d->out;
    int nerr = d->nerr;
    char *buf = NULL;
    size_t len = 0;
    FILE *sink = open_memstream(&buf, &len);
    if (!sink)
        DIE("out of memory");
    d->out = sink;
    bool ok = cg_check(g);
    d->out = keep;
    d->nerr = nerr;
    fclose(sink);
    free(buf);
    return ok;
}

/* memplan: the plans of both steps, proved */
bool stage_memplan(Compilation *c)
{
    const Graph *g = c->g;
    memplan(g, !c->no_inplace, &c->plan[0]);
    memplan(g->infer, !c->no_inplace, &c->plan[1]);
    if (!memplan_verify(g, &c->plan[0], stderr) || !memplan_verify(g->infer, &c->plan[1], stderr))
        DIE("the memory plan verifier failed");
    c->planned = true;
    return dump_memplan(c->dump, g, &c->plan[0]);
}

/* The plans the program is lowered with: none under --no-memplan. */
const CgPlans *compilation_plans(const Compilation *c, CgPlans *out)
{
    if (c->no_memplan || !c->planned)
        return NULL;
    *out = (CgPlans){&c->plan[0], &c->plan[1], NULL, TARGET_CPU};
    return out;
}

/* program: the lowered program, proved from itself; its dump waits for the
 * kvstore stage when that runs, since it writes the placement into it */
bool stage_program(Compilation *c)
{
    if (!cg_check(c->g))
        return false;
    CgPlans plans;
    lower(c->g, compilation_plans(c, &plans), &c->prog);
    c->lowered = true;
    if (!program_verify(&c->prog, stderr))
        DIE("the lowered program does not verify");
    return c->want_kv || dump_program(c->dump, &c->prog, c->g);
}

/* The machine the cost models assume (built-in or file) into *m; a GPU
 * program's default: one H200 (the device the GPU check runs on; --machine
 * and --devices describe others), whose --devices default is 1 */
static bool compilation_machine(const Compilation *c, KvMachine *m, int *devices)
{
    bool gpu_default = !c->machine && c->kernels == TARGET_CUDA;
    const char *name = c->machine ? c->machine : gpu_default ? "h200x8" : "cpu";
    *devices = gpu_default && c->kv.devices == 0 ? 1 : c->kv.devices;
    return kv_machine_builtin(c->g->diag, name, m) || kv_machine_load(c->g->diag, name, m);
}

/* gpu-cost: the GPU cost model of the lowered program on one device of the
 * machine (passes/gpucost.h), at --batch-size (or the profile's), else the
 * train block's.  A machine without devices has no GPU to price: an error
 * when --dump=gpu-cost or --calibrate named it, else nothing. */
bool stage_gpucost(Compilation *c)
{
    int devices;
    KvMachine *m = &c->gpu_machine;
    if (!compilation_machine(c, m, &devices))
        return false;
    if (m->devices < 1) {
        if (c->gpu_named)
            diag_plain_error(c->g->diag,
                             "%s: the GPU cost model needs a machine with devices; '%s' has "
                             "none (--machine=h100, h200, a100 or a file: docs/kvstore.md)",
                             c->gpu_named, m->name);
        return !c->gpu_named;
    }
    GcOptions go = {.batch = c->kv.batch, .autotune = true, .workspace_mb = 1024};
    train_gpu_options(c->g, &go);
    if (go.batch <= 0) { /* the train block's batch_size, the program's default */
        for (int i = 0; i < c->g->ntrain; i++)
            if (strcmp(c->g->train[i].key, "batch_size") == 0 && c->g->train[i].val->kind == CV_INT)
                go.batch = c->g->train[i].val->i;
        go.batch = go.batch > 0 ? go.batch : 32;
    }
    if (!gpucost_predict(c->g, &c->prog, m, &go, c->g->diag, &c->gpu))
        return false;
    c->priced = true;
    return dump_gpucost(c->dump, c->g, &c->gpu);
}

/* kvstore: the machine (built-in or file), then the placement */
bool stage_kvstore(Compilation *c)
{
    Diag *d = c->g->diag;
    KvMachine m;
    KvOptions ko = c->kv;
    if (!compilation_machine(c, &m, &ko.devices))
        return false;
    if (!ko.kvstore) /* the train block's kvstore key (the flag overrides it) */
        ko.kvstore = train_kvstore(c->g);
    if (!c->kv_bucket_set)
        ko.bucket_mb = -1;
    ko.nstate = train_optimizer_nstate(c->g);
    ko.dynamic_scale = train_loss_scale_dynamic(c->g);
    /* on a machine with devices its compute is the GPU cost model's */
    ko.call_sec = c->priced ? c->gpu.train_sec : NULL;
    /* the table and the reasoning, in memory: the dump goes where --dump
     * says, then the reasoning (--explain=kvstore) after it */
    char *text = NULL, *why = NULL;
    size_t len = 0, wlen = 0;
    FILE *table = open_memstream(&text, &len), *explain = open_memstream(&why, &wlen);
    if (!table || !explain)
        DIE("out of memory");
    bool ok =
        kvstore_place(c->g, &c->prog, &m, &ko, d, table, c->kv_explain ? explain : NULL, &c->kvr);
    if (fclose(table) != 0 || fclose(explain) != 0)
        DIE("out of memory");
    if (ok && !program_verify(&c->prog, stderr))
        DIE("the lowered program's placement does not verify");
    c->placed = ok;
    ok = ok && dump_kvstore(c->dump, c->g, &c->prog, &c->kvr, text);
    if (ok && c->kv_explain)
        fputs(why, c->kv_explain);
    ok = ok && dump_program(c->dump, &c->prog, c->g);
    free(text);
    free(why);
    return ok;
}

static bool stage_wanted(const Compilation *c, const char *name)
{
    if (strcmp(name, "kvstore") == 0)
        return c->want_kv;
    if (strcmp(name, "gpu-cost") == 0) /* the placement's compute on a GPU */
        return c->want_gpu || c->want_kv;
    if (strcmp(name, "program") == 0) /* the placement is written into it */
        return c->want_program || c->want_kv || c->want_gpu;
    return true;
}

bool stages_run(Compilation *c)
{
    /* --report alone: the placement only where the backend can lower */
    if ((c->want_kv || c->want_gpu) && c->kv_quiet && !can_lower_quietly(c->g))
        c->want_kv = c->want_gpu = false;
    for (int i = pass_count; i < stage_count; i++)
        if (stage_wanted(c, pass_pipeline[i].name) && !pass_pipeline[i].stage(c))
            return false;
    return true;
}
