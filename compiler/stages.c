/* stages.c - the stages of the pass table after the graph passes: memplan
 * (both steps' buffer plans), program (the lowered program) and kvstore
 * (the gradient placement, written into the program).  Each is an entry of
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
    c->planned = c->lowered = c->placed = false;
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

/* kvstore: the machine (built-in or file), then the placement */
bool stage_kvstore(Compilation *c)
{
    Diag *d = c->g->diag;
    KvMachine m;
    /* a GPU program's default machine: one H200 (the device the GPU check
     * runs on; --machine and --devices describe others) */
    bool gpu_default = !c->machine && c->kernels == TARGET_CUDA;
    const char *name = c->machine ? c->machine : gpu_default ? "h200x8" : "cpu";
    if (!kv_machine_builtin(d, name, &m) && !kv_machine_load(d, name, &m))
        return false;
    KvOptions ko = c->kv;
    if (!ko.kvstore) /* the train block's kvstore key (the flag overrides it) */
        ko.kvstore = train_kvstore(c->g);
    if (gpu_default && ko.devices == 0)
        ko.devices = 1;
    if (!c->kv_bucket_set)
        ko.bucket_mb = -1;
    ko.nstate = train_optimizer_nstate(c->g);
    ko.dynamic_scale = train_loss_scale_dynamic(c->g);
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
    if (strcmp(name, "program") == 0) /* the placement is written into it */
        return c->want_program || c->want_kv;
    return true;
}

bool stages_run(Compilation *c)
{
    /* --report alone: the placement only where the backend can lower */
    if (c->want_kv && c->kv_quiet && !can_lower_quietly(c->g))
        c->want_kv = false;
    for (int i = pass_count; i < stage_count; i++)
        if (stage_wanted(c, pass_pipeline[i].name) && !pass_pipeline[i].stage(c))
            return false;
    return true;
}
