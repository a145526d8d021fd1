/* fuzz_machine.c - the libFuzzer target for machine files (ampc
 * --machine=FILE: passes/kvstore.c, docs/kvstore.md, "The machine file").
 *
 * Each input is read as a machine file.  One refused must have said why
 * (an error through the Diag).  One accepted must hold what the reader
 * promises: a name of letters, digits, '-', '_' and '.'; devices 0 to 4096;
 * flags 0 or 1; every rate finite and >= 0, and > 0 where the cost model
 * divides by it.  It is then given to the placement pass on a small
 * training program (with devices, after the GPU cost model has priced its
 * calls, whose times must be finite too), on one machine and on two, and
 * every prediction must be
 * finite and >= 0 (or -1, not available), the chosen placement one of them,
 * and the placed program must verify (its predictions in int64
 * microseconds): a rate the reader let through that the model divides by,
 * or one that overflows it, is a bug (1e308 was).  Diagnostics go to /dev/null.
 *
 *   make build/fuzz/fuzz_machine && tests/fuzz/run.sh build/fuzz/fuzz_machine check
 * Seeds: tests/fuzz/corpus_machine/. */
#include "driver.h"
#include "fuzz_common.h"
#include "../codegen/codegen.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bug(const char *what)
{
    fprintf(stderr, "fuzz_machine: %s\n", what);
    abort();
}

/* A CNN with BatchNorm and a dense head, its training graph made once. */
static const Graph *train_graph(void)
{
    static Diag d;
    static Graph *g;
    if (g)
        return g;
    static const char src[] =
        "model m(data: float32[N,3,8,8], softmax_label: float32[N]) {\n"
        "    x = Activation(BatchNorm(Convolution(data, num_filter=8, kernel=(3,3), pad=(1,1))),\n"
        "                   act_type=\"relu\")\n"
        "    return SoftmaxOutput(FullyConnected(Flatten(x), num_hidden=10), softmax_label)\n"
        "}\n"
        "train m { amp = float16 }\n";
    diag_init(&d, null_out());
    g = frontend_compile(&d, "m.sym", src, strlen(src), NULL);
    if (!g)
        bug("the training graph does not compile");
    return g;
}

static void check_machine(const KvMachine *m)
{
    bool name_ok = m->name[0] != 0;
    for (const char *p = m->name; *p; p++)
        name_ok &= *p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') ||
                   (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z');
    if (!name_ok)
        bug("an accepted machine's name holds other characters");
    if (m->devices < 0 || m->devices > 4096)
        bug("an accepted machine has devices outside 0..4096");
    if ((m->device_fused_mp != 0 && m->device_fused_mp != 1) ||
        (m->host_fused_mp != 0 && m->host_fused_mp != 1))
        bug("an accepted machine has a flag other than 0 or 1");
    if (m->sm_count < 0 || m->sm_count > 4096 || m->threads_per_sm < 0 ||
        m->threads_per_sm > 4096 || (m->devices > 0 && (m->sm_count < 1 || m->threads_per_sm < 1)))
        bug("an accepted machine has an SM count or size outside its bounds");
    const double rates[] = {
        m->device_mem_GBps, m->link_GBps,      m->link_latency_us,  m->pcie_GBps,
        m->pcie_latency_us, m->host_mem_GBps,  m->host_cvt_Gelem_s, m->host_tflops,
        m->net_Gbps,        m->net_latency_us, m->sm_clock_GHz,     m->l2_MB,
        m->device_mem_GB,   m->tc_f16_tflops,  m->tc_bf16_tflops,   m->tc_tf32_tflops,
        m->fp32_tflops,     m->fp64_tflops,    m->dram_latency_ns,  m->l2_latency_ns,
        m->launch_us,       m->api_us};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (!isfinite(rates[i]) || rates[i] < 0)
            bug("an accepted machine has a rate that is not finite and >= 0");
}

static bool finite_range(GcRange r)
{
    return isfinite(r.fast) && isfinite(r.slow) && r.fast >= 0 && r.slow >= r.fast;
}

/* The placement on m over `machines` machines: predictions finite and >= 0
 * (or -1), the best one of them. */
static void place(const KvMachine *m, int machines)
{
    const Graph *g = train_graph();
    Program p;
    lower(g, NULL, &p);
    Diag d;
    diag_init(&d, null_out());
    KvOptions ko = {.machines = machines, .bucket_mb = -1, .nstate = 1};
    /* with devices, the compute is the GPU cost model's (as stage_kvstore
     * takes it): its predictions must be finite too */
    GcResult gc;
    bool priced = false;
    if (m->devices > 0) {
        GcOptions go = {.batch = 32,
                        .nstate = 1,
                        .dynamic = true,
                        .log_interval = 50,
                        .autotune = true,
                        .workspace_mb = 1024};
        if (!gpucost_predict(g, &p, m, &go, &d, &gc))
            bug("the GPU cost model refused an accepted machine with devices");
        priced = true;
        if (!finite_range(gc.device) || !finite_range(gc.step) || !finite_range(gc.host))
            bug("a GPU cost model prediction is not finite and >= 0");
        for (int i = 0; i < gc.ntrain; i++)
            if (!isfinite(gc.train_sec[i]) || gc.train_sec[i] < 0)
                bug("a call's GPU time is not finite and >= 0");
        ko.call_sec = gc.train_sec;
    }
    KvResult res;
    if (kvstore_place(g, &p, m, &ko, &d, NULL, NULL, &res)) {
        for (int k = 0; k < KV_COUNT; k++)
            if (!(res.step_ms[k] == -1 || (isfinite(res.step_ms[k]) && res.step_ms[k] >= 0)))
                bug("a predicted step time is not finite and >= 0 (nor -1)");
        if (res.step_ms[res.best] < 0)
            bug("the chosen placement is not available");
        if (!program_verify(&p, NULL))
            bug("the placed program does not verify");
    } else if (d.nerr == 0) {
        bug("the placement failed without an error");
    }
    if (priced)
        gpucost_free(&gc);
    diag_free(&d);
    program_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Diag d;
    diag_init(&d, null_out());
    KvMachine m;
    bool ok = kv_machine_parse_text(&d, "fuzz.machine", (const char *)data, size, &m);
    if (!ok && d.nerr == 0)
        bug("a machine file refused without an error");
    diag_free(&d);
    if (ok) {
        check_machine(&m);
        place(&m, 1);
        place(&m, 2);
    }
    return 0;
}
