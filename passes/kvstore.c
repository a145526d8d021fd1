/* kvstore.c - the gradient placement (issue 12, item 1; docs/kvstore.md).
 *
 * After lowering, every gradient of the train step is known with its bytes,
 * dtype and the call of backward that completes it.  From those, the
 * parameters and optimizer (fp32 masters, state tensors), the number of
 * devices and machines, and a machine description, this pass predicts the
 * time per step of each of MXNet's placements:
 *
 *   local      copy gradients to the host, sum and update there, copy the
 *              weights back (on a CPU-only machine: sum in shared memory)
 *   device     sum on the devices (each owns a 1/D share), update the share
 *              there, broadcast the weights
 *   nccl       ring all-reduce, then every device updates its own copy
 *   dist_sync  the same across machines: reduce-scatter inside the machine,
 *              all-reduce of the share over the network, all-gather
 *
 * Gradients travel in buckets (filled in the order backward completes
 * them), each bucket through its placement's stages as a pipeline of FIFO
 * resources, overlapping the rest of backward.  The step takes
 * max(forward + backward, the last bucket's end).  The cheapest placement
 * wins unless one is named.  Cheap (one sweep of the calls, then a few
 * hundred small simulations) and deterministic: no clock, no randomness. */
#include "kvstore.h"
#include "../runtime/settings.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- machine descriptions ----------------------------------------------------- */

typedef enum { MK_INT, MK_NUM, MK_FLAG, MK_NAME } MKind;
typedef struct {
    const char *key;
    MKind kind;
    size_t off;
} MKey;

#define MK(k, kind) {#k, kind, offsetof(KvMachine, k)}
static const MKey mkeys[] = {
    MK(name, MK_NAME),
    MK(devices, MK_INT),
    MK(device_mem_GBps, MK_NUM),
    MK(device_fused_mp, MK_FLAG),
    MK(link_GBps, MK_NUM),
    MK(link_latency_us, MK_NUM),
    MK(pcie_GBps, MK_NUM),
    MK(pcie_latency_us, MK_NUM),
    MK(host_mem_GBps, MK_NUM),
    MK(host_cvt_Gelem_s, MK_NUM),
    MK(host_tflops, MK_NUM),
    MK(host_fused_mp, MK_FLAG),
    MK(net_Gbps, MK_NUM),
    MK(net_latency_us, MK_NUM),
    /* one device, for the GPU cost model (passes/gpucost.c) */
    MK(sm_count, MK_INT),
    MK(sm_clock_GHz, MK_NUM),
    MK(threads_per_sm, MK_INT),
    MK(l2_MB, MK_NUM),
    MK(device_mem_GB, MK_NUM),
    MK(tc_f16_tflops, MK_NUM),
    MK(tc_bf16_tflops, MK_NUM),
    MK(tc_tf32_tflops, MK_NUM),
    MK(fp32_tflops, MK_NUM),
    MK(fp64_tflops, MK_NUM),
    MK(dram_latency_ns, MK_NUM),
    MK(l2_latency_ns, MK_NUM),
    MK(launch_us, MK_NUM),
    MK(api_us, MK_NUM),
};
#define NMKEYS ((int)(sizeof mkeys / sizeof mkeys[0]))

/* Built-in machines: the numbers and their sources are in docs/kvstore.md
 * ("Built-in machines"); keep the two in step.  Each string is parsed as a
 * machine file is. */
#define NO_GPU                                                                                     \
    "sm_count = 0\nsm_clock_GHz = 0\nthreads_per_sm = 0\nl2_MB = 0\ndevice_mem_GB = 0\n"           \
    "tc_f16_tflops = 0\ntc_bf16_tflops = 0\ntc_tf32_tflops = 0\nfp32_tflops = 0\n"                 \
    "fp64_tflops = 0\ndram_latency_ns = 0\nl2_latency_ns = 0\nlaunch_us = 0\napi_us = 0\n"
/* one H100 SXM5 (H200: the same die) without its memory */
#define HOPPER_SXM                                                                                 \
    "sm_count = 132\nsm_clock_GHz = 1.98\nthreads_per_sm = 2048\nl2_MB = 50\n"                     \
    "tc_f16_tflops = 989.4\ntc_bf16_tflops = 989.4\ntc_tf32_tflops = 494.7\n"                      \
    "fp32_tflops = 66.9\nfp64_tflops = 33.5\ndram_latency_ns = 300\nl2_latency_ns = 100\n"         \
    "launch_us = 2\napi_us = 4\n"
#define H100_MEM "device_mem_GB = 80\ndevice_mem_GBps = 3350\n"
#define H200_MEM "device_mem_GB = 141\ndevice_mem_GBps = 4800\n"
/* an H100 or H200 server's links and host (the devices key apart) */
#define HGX_HOST                                                                                   \
    "device_fused_mp = 1\nlink_GBps = 450\nlink_latency_us = 5\npcie_GBps = 50\n"                  \
    "pcie_latency_us = 5\nhost_mem_GBps = 40\nhost_cvt_Gelem_s = 2\nhost_tflops = 5\n"             \
    "host_fused_mp = 1\n"
static const char *const builtin_text[] = {
    /* this project's CPU-only build machine class: 2 cores */
    "name = cpu\ndevices = 0\ndevice_mem_GBps = 0\ndevice_fused_mp = 0\n"
    "link_GBps = 5\nlink_latency_us = 2\npcie_GBps = 0\npcie_latency_us = 0\n"
    "host_mem_GBps = 10\nhost_cvt_Gelem_s = 0.5\nhost_tflops = 0.05\nhost_fused_mp = 1\n"
    "net_Gbps = 10\nnet_latency_us = 30\n" NO_GPU,
    /* 4x TITAN X (Pascal) on PCIe 3.0 x16, P2P through the PCIe switch */
    "name = titanx-pcie3\ndevices = 4\ndevice_mem_GBps = 480\n"
    "device_fused_mp = 1\nlink_GBps = 10\nlink_latency_us = 10\npcie_GBps = 12\n"
    "pcie_latency_us = 10\nhost_mem_GBps = 20\nhost_cvt_Gelem_s = 1\nhost_tflops = 0.5\n"
    "host_fused_mp = 1\nnet_Gbps = 10\nnet_latency_us = 30\n"
    "sm_count = 28\nsm_clock_GHz = 1.531\nthreads_per_sm = 2048\nl2_MB = 3\ndevice_mem_GB = 12\n"
    "tc_f16_tflops = 11\ntc_bf16_tflops = 11\ntc_tf32_tflops = 11\nfp32_tflops = 11\n"
    "fp64_tflops = 0.34\ndram_latency_ns = 450\nl2_latency_ns = 200\nlaunch_us = 3\n"
    "api_us = 4\n",
    /* 8x H100 SXM on NVLink 4 (NVSwitch), 400 Gb/s between machines */
    "name = h100x8\ndevices = 8\n" H100_MEM HGX_HOST
    "net_Gbps = 400\nnet_latency_us = 5\n" HOPPER_SXM,
    /* 8x H200 on NVLink 4: H100's links, faster memory */
    "name = h200x8\ndevices = 8\n" H200_MEM HGX_HOST
    "net_Gbps = 400\nnet_latency_us = 5\n" HOPPER_SXM,
    /* h100x8 with one 100 Gb/s link per machine */
    "name = h100x8-100g\ndevices = 8\n" H100_MEM HGX_HOST
    "net_Gbps = 100\nnet_latency_us = 10\n" HOPPER_SXM,
    /* one H100 SXM, one H200, one A100 SXM 80 GB: the GPU cost model's machines */
    "name = h100\ndevices = 1\n" H100_MEM HGX_HOST
    "net_Gbps = 400\nnet_latency_us = 5\n" HOPPER_SXM,
    "name = h200\ndevices = 1\n" H200_MEM HGX_HOST
    "net_Gbps = 400\nnet_latency_us = 5\n" HOPPER_SXM,
    "name = a100\ndevices = 1\ndevice_mem_GB = 80\ndevice_mem_GBps = 2039\n"
    "device_fused_mp = 1\nlink_GBps = 300\nlink_latency_us = 5\npcie_GBps = 25\n"
    "pcie_latency_us = 5\nhost_mem_GBps = 40\nhost_cvt_Gelem_s = 2\nhost_tflops = 5\n"
    "host_fused_mp = 1\nnet_Gbps = 200\nnet_latency_us = 5\n"
    "sm_count = 108\nsm_clock_GHz = 1.41\nthreads_per_sm = 2048\nl2_MB = 40\n"
    "tc_f16_tflops = 312\ntc_bf16_tflops = 312\ntc_tf32_tflops = 156\nfp32_tflops = 19.5\n"
    "fp64_tflops = 9.7\ndram_latency_ns = 400\nl2_latency_ns = 150\nlaunch_us = 2\n"
    "api_us = 4\n",
};
const char *const kv_builtin_names[] = {"cpu",  "titanx-pcie3", "h100x8", "h200x8", "h100x8-100g",
                                        "h100", "h200",         "a100",   NULL};

static bool mfail(Diag *d, int file, int line, int col, const char *fmt, const char *a,
                  const char *b)
{
    Loc l = {file, line, col};
    diag_error(d, l, fmt, a, b);
    return false;
}

/* The range of a machine file's numbers: every rate and latency at most
 * 1e9 (a million times today's largest), a rate the model divides by at
 * least 1e-6, so every prediction is finite and fits the program's int64
 * microseconds (found by fuzz_machine: 1e308 made an internal error). */
#define MACHINE_MAX 1e9
#define MACHINE_MIN_RATE 1e-6

/* one `key = value` line (trimmed, not empty, not a comment) */
static bool machine_line(Diag *d, int file, int line, const char *s, size_t n, KvMachine *m,
                         int *seen)
{
    const char *eq = memchr(s, '=', n);
    if (!eq)
        return mfail(d, file, line, 1, "expected 'key = value' in a machine file%s%s", "", "");
    size_t kl = (size_t)(eq - s);
    while (kl && (s[kl - 1] == ' ' || s[kl - 1] == '\t'))
        kl--;
    const char *v = eq + 1;
    while (v < s + n && (*v == ' ' || *v == '\t'))
        v++;
    int vcol = (int)(v - s) + 1;
    char key[64], val[64];
    size_t vl = (size_t)(s + n - v);
    if (kl == 0)
        return mfail(d, file, line, 1, "expected a key before '='%s%s", "", "");
    if (kl >= sizeof key) {
        diag_error(d, (Loc){file, line, 1},
                   "a key of %zu bytes: no machine-file key is longer "
                   "than %zu (docs/kvstore.md)",
                   kl, sizeof key - 1);
        return false;
    }
    memcpy(key, s, kl);
    key[kl] = 0;
    int k = 0;
    while (k < NMKEYS && strcmp(mkeys[k].key, key) != 0)
        k++;
    if (k == NMKEYS)
        return mfail(d, file, line, 1, "unknown key '%s' in a machine file%s (docs/kvstore.md)",
                     key, "");
    if (seen[k]) {
        Loc l = {file, line, 1};
        diag_error(d, l, "key '%s' given twice (first on line %d)", key, seen[k]);
        return false;
    }
    seen[k] = line;
    if (vl == 0)
        return mfail(d, file, line, vcol, "'%s' needs a value%s", key, "");
    if (vl >= sizeof val) {
        diag_error(d, (Loc){file, line, vcol},
                   "the value of '%s' is %zu bytes, longer than the %zu a machine file takes", key,
                   vl, sizeof val - 1);
        return false;
    }
    memcpy(val, v, vl);
    val[vl] = 0;
    char *field = (char *)m + mkeys[k].off;
    if (mkeys[k].kind == MK_NAME) {
        for (size_t i = 0; i < vl; i++)
            if (!(val[i] == '-' || val[i] == '_' || val[i] == '.' || (val[i] >= '0' && val[i] <= '9') ||
                  (val[i] >= 'a' && val[i] <= 'z') || (val[i] >= 'A' && val[i] <= 'Z')))
                return mfail(d, file, line, vcol,
                             "'%s': a name is letters, digits, '-', '_' and '.', not '%s'", key, val);
        snprintf(field, sizeof m->name, "%s", val);
        return true;
    }
    double x; /* settings.h's number grammar: decimal; bounded, so no prediction overflows */
    if (!rt_parse_f64(val, 0, MACHINE_MAX, &x))
        return mfail(d, file, line, vcol, "'%s' must be a decimal number from 0 to 1e9, not '%s'",
                     key, val);
    if (mkeys[k].kind == MK_NUM) {
        *(double *)(void *)field = x;
        return true;
    }
    if (x != floor(x) || x > (mkeys[k].kind == MK_FLAG ? 1 : 4096))
        return mfail(d, file, line, vcol,
                     mkeys[k].kind == MK_FLAG ? "'%s' must be 0 or 1, not '%s'"
                                              : "'%s' must be a whole number from 0 to 4096, not '%s'",
                     key, val);
    *(int *)(void *)field = (int)x;
    return true;
}

/* the value of key k of m as a number */
static double machine_value(const KvMachine *m, int k)
{
    const void *field = (const char *)m + mkeys[k].off;
    return mkeys[k].kind == MK_NUM ? *(const double *)field : (double)*(const int *)field;
}

/* the values that would make the models divide by zero, where they are used */
static bool machine_check(Diag *d, int file, const KvMachine *m, const int *seen)
{
    static const char *const always[] = {"link_GBps", "host_mem_GBps", "host_cvt_Gelem_s",
                                         "host_tflops", "net_Gbps"};
    static const char *const gpu[] = {
        "device_mem_GBps", "pcie_GBps",       "sm_count",       "sm_clock_GHz",   "threads_per_sm",
        "device_mem_GB",   "tc_f16_tflops",   "tc_bf16_tflops", "tc_tf32_tflops", "fp32_tflops",
        "fp64_tflops",     "dram_latency_ns", "l2_latency_ns"};
    for (int k = 0; k < NMKEYS; k++) {
        const char *key = mkeys[k].key;
        bool need = false;
        for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
            need |= strcmp(always[i], key) == 0;
        for (size_t i = 0; m->devices > 0 && i < sizeof gpu / sizeof gpu[0]; i++)
            need |= strcmp(gpu[i], key) == 0;
        bool count = mkeys[k].kind == MK_INT; /* sm_count, threads_per_sm */
        if (need && machine_value(m, k) < (count ? 1 : MACHINE_MIN_RATE))
            return mfail(d, file, seen[k], 1,
                         count ? "'%s' must be at least 1 (the model divides by it)%s"
                               : "'%s' must be at least 1e-6 (the model divides by it)%s",
                         key, m->devices > 0 ? " on a machine with devices" : "");
    }
    return true;
}

static bool machine_parse(Diag *d, int file, KvMachine *m)
{
    const SrcFile *f = diag_file(d, file);
    memset(m, 0, sizeof *m);
    const char *nul = memchr(f->text, 0, f->len);
    if (nul) { /* the lines below are C strings: a NUL would cut one short */
        Loc l = {file, 1, 1};
        for (const char *q = f->text; q < nul; q++) {
            l.col = *q == '\n' ? 1 : l.col + 1;
            l.line += *q == '\n';
        }
        diag_error(d, l, "a NUL byte in a machine file (it is text: docs/kvstore.md)");
        return false;
    }
    int seen[NMKEYS] = {0}, line = 0;
    const char *p = f->text, *end = f->text + f->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        line++;
        const char *s = p;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        const char *t = e;
        while (t > s && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r'))
            t--;
        if (t > s && *s != '#' && !machine_line(d, file, line, s, (size_t)(t - s), m, seen))
            return false;
        p = nl ? nl + 1 : end;
    }
    for (int k = 0; k < NMKEYS; k++)
        if (!seen[k])
            return mfail(d, file, line ? line : 1, 1,
                         "the machine file ends without '%s' (every key is required: docs/kvstore.md)%s",
                         mkeys[k].key, "");
    return machine_check(d, file, m, seen);
}

bool kv_machine_load(Diag *d, const char *path, KvMachine *m)
{
    int file = diag_load_file(d, path);
    if (file < 0) {
        diag_plain_error(d, "cannot read machine file '%s': %s", path, diag_load_error(d));
        return false;
    }
    return machine_parse(d, file, m);
}

bool kv_machine_parse_text(Diag *d, const char *name, const char *text, size_t len, KvMachine *m)
{
    return machine_parse(d, diag_add_buffer(d, name, text, len), m);
}

bool kv_machine_builtin(Diag *d, const char *name, KvMachine *m)
{
    for (int i = 0; kv_builtin_names[i]; i++)
        if (strcmp(kv_builtin_names[i], name) == 0) {
            char path[96];
            snprintf(path, sizeof path, "<built-in machine %s>", name);
            if (!kv_machine_parse_text(d, path, builtin_text[i], strlen(builtin_text[i]), m))
                DIE("the built-in machine %s does not parse", name);
            return true;
        }
    return false;
}

/* ---- the model's side: gradients, their sizes and completion times ------------- */

typedef struct {
    int buf;          /* gradient buffer */
    int64_t elems;
    int64_t wire;     /* bytes on the wire */
    int64_t weight;   /* bytes of the weight copied back (its stored dtype) */
    int64_t upd;      /* bytes the update moves (in its placement's memory) */
    int64_t upd_unfused; /* the same without a fused multi-precision kernel */
    int64_t cvt16;    /* 16-bit elements the host converts in the update */
    int64_t wire16;   /* elements that travel in 16 bits */
    double ready;     /* s after the step starts: backward has written it */
    int order;        /* the call that completes it */
} Grad;

typedef struct {
    const KvMachine *m;
    const KvOptions *o;
    int D, M;          /* devices (CPU: processes) per machine, machines */
    bool cpu;          /* CPU-only machine */
    int64_t batch;
    double fwd, bwd;   /* s per step on one device */
    double fwd_flops;  /* per sample */
    Grad *g;
    int ng;
    DType wire, gdt;   /* the 16-bit gradients' wire dtype and own dtype */
    const char *opt;   /* optimizer name */
    bool mp;           /* some parameter has an fp32 master */
    bool dynamic;      /* dynamic loss scale: the found-inf check reads each gradient */
} Kv;

static const ConfigEntry *train_entry(const Graph *g, const char *key)
{
    for (int i = 0; i < g->ntrain; i++)
        if (strcmp(g->train[i].key, key) == 0)
            return &g->train[i];
    return NULL;
}

static const char *optimizer_name(const Graph *g)
{
    const ConfigEntry *e = train_entry(g, "optimizer");
    if (e && (e->val->kind == CV_CALL || e->val->kind == CV_SYM || e->val->kind == CV_STR))
        return e->val->s;
    return "sgd";
}

/* FLOPs per sample of each call.  Backward takes twice the forward FLOPs
 * in all (the usual 2x: the data and the weight gradients), spread over
 * the backward calls as twice their forward nodes' (a call with none, such
 * as a fused or accumulating one, weighs nothing), so the total does not
 * depend on how the training passes named or fused backward nodes. */
static double *call_flops(const Graph *g, const ProgStep *s, bool *is_bwd, double *fwd_total)
{
    StrMap names = {0};
    for (int i = 0; i < g->nnodes; i++)
        strmap_put(&names, g->nodes[i]->name, i);
    double *f = calloc((size_t)s->ncalls + 1, sizeof *f);
    if (!f)
        DIE("out of memory");
    *fwd_total = 0;
    bool seen_bwd = false;
    for (int c = 0; c < s->ncalls; c++) {
        const Node *n = g->nodes[s->calls[c].node];
        bool bwd = strncmp(op_info(n->op)->name, "_backward", 9) == 0;
        seen_bwd |= bwd;
        is_bwd[c] = seen_bwd; /* after the first backward call, all of it is backward */
        const Node *fw = n;
        if (bwd) {
            size_t len = strlen(n->name);
            char name[512];
            if (len > 4 && len < sizeof name && strcmp(n->name + len - 4, "_bwd") == 0) {
                memcpy(name, n->name, len - 4);
                name[len - 4] = 0;
                int *id = strmap_get(&names, name);
                fw = id ? g->nodes[*id] : NULL;
            } else {
                fw = NULL;
            }
        }
        double x = fw && fw->shape.rank >= 0 ? op_info(fw->op)->flops(g, fw) : 0;
        f[c] = bwd ? 2 * x : x;
        if (!seen_bwd)
            *fwd_total += f[c];
    }
    double bwd_total = 0;
    int nbwd = 0;
    for (int c = 0; c < s->ncalls; c++)
        if (is_bwd[c])
            bwd_total += f[c], nbwd++;
    for (int c = 0; c < s->ncalls; c++)
        if (is_bwd[c])
            f[c] = bwd_total > 0 ? f[c] * (2 * *fwd_total / bwd_total) : 2 * *fwd_total / nbwd;
    strmap_free(&names);
    return f;
}

static int grad_cmp(const void *a, const void *b)
{
    const Grad *x = a, *y = b;
    return x->order != y->order ? (x->order < y->order ? -1 : 1)
                                : (x->buf < y->buf ? -1 : x->buf > y->buf);
}

/* Sizes saturate at INT64_MAX instead of wrapping: a program that passed
 * cg_check cannot reach it, and a saturated size only makes a slow
 * prediction, never a wrong buffer. */
static int64_t mul_sat(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t add_sat(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

/* bytes of one 16-bit-or-not gradient on the wire, as program_verify counts */
static int wire_size(DType own, DType wire) { return dtype_size(own) >= 4 ? dtype_size(own) : dtype_size(wire); }

static void collect(Kv *k, const Graph *g, const Program *p)
{
    const ProgStep *s = &p->step[STEP_TRAIN];
    bool *is_bwd = calloc((size_t)s->ncalls + 1, sizeof(bool));
    int *writer = malloc(sizeof(int) * ((size_t)p->nbuf + 1));
    if (!is_bwd || !writer)
        DIE("out of memory");
    double fwd_flops;
    double *f = call_flops(g, s, is_bwd, &fwd_flops);
    /* seconds per call: on a CPU-only machine its FLOPs at the host's
     * rate; on a GPU, the GPU cost model's time of the call (one owner of
     * the device's speed: its machine keys and efficiencies) */
    if (!k->cpu && !k->o->call_sec)
        DIE("kvstore: a machine with devices needs the GPU cost model's call times");
    double rate = k->cpu ? k->m->host_tflops * 1e12 / k->D : 0;
    for (int c = 0; c < s->ncalls; c++)
        f[c] = k->cpu ? f[c] * (double)k->batch / rate : k->o->call_sec[c];
    k->fwd_flops = fwd_flops;
    k->fwd = k->bwd = 0;
    for (int c = 0; c < s->ncalls; c++)
        *(is_bwd[c] ? &k->bwd : &k->fwd) += f[c];
    for (int b = 0; b < p->nbuf; b++)
        writer[b] = -1;
    for (int c = 0; c < s->ncalls; c++)
        for (int j = 0; j < s->calls[c].nout; j++)
            if (s->calls[c].out[j] >= 0)
                writer[s->calls[c].out[j]] = c;
    k->g = calloc((size_t)p->nparams + 1, sizeof(Grad));
    if (!k->g)
        DIE("out of memory");
    int nstate = k->o->nstate;
    for (int q = 0; q < p->nparams; q++) {
        int b = p->param_grad[q];
        if (b < 0 || p->buf[b].elems.per_sample != 0)
            continue;
        const ProgBuffer *gb = &p->buf[b], *pb = &p->buf[p->param_buf[q]];
        Grad *x = &k->g[k->ng++];
        bool master = dtype_size(pb->dtype) < 4; /* a 16-bit weight: an fp32 master updates it */
        k->mp |= master;
        x->buf = b;
        x->elems = gb->elems.fixed;
        int ws = wire_size(gb->dtype, k->wire);
        x->wire = mul_sat(x->elems, ws);
        x->wire16 = ws < 4 ? x->elems : 0;
        x->weight = mul_sat(x->elems, dtype_size(pb->dtype));
        /* docs/numerics.md section 4: read the gradient, read and write the
         * (master) weight and each state tensor, write the 16-bit weight */
        int64_t per = ws + 8 + 8 * nstate + (master ? 2 : 0) + (k->dynamic ? ws : 0);
        x->upd = mul_sat(x->elems, per);
        /* without a fused kernel (MXNet 1.x's update_multi_precision):
         * astype to fp32 (read 2 + write 4) and a cast back (read 4 + write 2)
         * around the fp32 update, which reads a 4-byte gradient */
        x->upd_unfused = master ? mul_sat(x->elems, (ws + 4) + (12 + 8 * nstate) + 6 + (k->dynamic ? ws : 0))
                                : x->upd;
        x->cvt16 = master ? mul_sat(x->elems, ws < 4 ? 2 : 1) : 0;
        int c = writer[b];
        double done = 0;
        for (int i = 0; i <= c && i < s->ncalls; i++)
            done += is_bwd[i] ? f[i] : 0;
        if (c < 0)
            done = k->bwd;
        x->order = c < 0 ? s->ncalls : c;
        x->ready = k->fwd + done;
    }
    qsort(k->g, (size_t)k->ng, sizeof(Grad), grad_cmp);
    free(f);
    free(is_bwd);
    free(writer);
}

/* ---- the cost model -------------------------------------------------------------- */

typedef struct {
    int64_t elems, wire, wire16, weight, upd, upd_unfused, cvt16;
    double ready;
    int first, n; /* into Kv.g */
} Bucket;

#define MAX_STAGES 4
typedef struct {
    double cost[MAX_STAGES];
    bool after_compute[MAX_STAGES]; /* the stage runs on the device (or CPU) that computes */
    int n;
} Stages;

static double lat(double us) { return us * 1e-6; }

/* the stages of one bucket under placement k (seconds) */
static Stages stages(const Kv *v, KvPlace k, const Bucket *b)
{
    const KvMachine *m = v->m;
    double D = v->D, M = v->M, host = m->host_mem_GBps * 1e9, cvt = m->host_cvt_Gelem_s * 1e9;
    double link = m->link_GBps * 1e9, dev = m->device_mem_GBps * 1e9, pcie = m->pcie_GBps * 1e9;
    double net = m->net_Gbps * 1e9 / 8;
    double upd_host = (double)(m->host_fused_mp ? b->upd : b->upd_unfused) / host +
                      (double)b->cvt16 / cvt;
    double upd_dev = (double)(m->device_fused_mp ? b->upd : b->upd_unfused) / dev;
    /* a sum of D gradients on the host reads D and writes one; 16-bit ones
     * are converted on the way in and out (MXNet sums fp16 as half_t) */
    double host_sum = (D + 1) * ((double)b->wire / host + (double)b->wire16 / cvt);
    /* local and device are MXNet's kvstores: one key, so one message, per
     * tensor; nccl and dist_sync send one message per bucket */
    double nt = (double)b->n;
    Stages s = {{0}, {0}, 0};
    switch (k) {
    case KV_LOCAL:
        if (v->cpu) {
            s.cost[s.n] = (v->D > 1 ? host_sum + D * (double)b->weight / host : 0) + upd_host;
            s.after_compute[s.n++] = true;
            break;
        }
        s.cost[s.n++] = fmax((double)b->wire / pcie, D * (double)b->wire / host) + nt * lat(m->pcie_latency_us);
        s.cost[s.n++] = (v->D > 1 ? host_sum : 0) + upd_host;
        s.cost[s.n++] = fmax((double)b->weight / pcie, D * (double)b->weight / host) + nt * lat(m->pcie_latency_us);
        break;
    case KV_DEVICE: /* MXNet's CommDevice: keys spread over the devices, each
                     * copied to its owner, summed there ((D + 1) reads and
                     * writes of the owner's share), updated, broadcast */
        if (v->D > 1)
            s.cost[s.n++] = (D - 1) / D * (double)b->wire / link + nt * (D - 1) * lat(m->link_latency_us) +
                            (D + 1) / D * (double)b->wire / dev;
        s.cost[s.n] = upd_dev / D;
        s.after_compute[s.n++] = true;
        if (v->D > 1)
            s.cost[s.n++] = (D - 1) / D * (double)b->weight / link + nt * (D - 1) * lat(m->link_latency_us);
        break;
    case KV_NCCL:
        s.cost[s.n++] = 2 * (D - 1) / D * (double)b->wire / link + 2 * (D - 1) * lat(m->link_latency_us);
        s.cost[s.n] = upd_dev;
        s.after_compute[s.n++] = true;
        break;
    case KV_DIST_SYNC: {
        double intra = (D - 1) / D * (double)b->wire / link + (D - 1) * lat(m->link_latency_us);
        s.cost[s.n++] = intra;
        s.cost[s.n++] = 2 * (M - 1) / M * (double)b->wire / net + 2 * (M - 1) * lat(m->net_latency_us);
        s.cost[s.n++] = intra;
        /* CPU-only: every process updates its copy, sharing host memory */
        s.cost[s.n] = v->cpu ? D * upd_host : upd_dev;
        s.after_compute[s.n++] = true;
        break;
    }
    default:
        break;
    }
    return s;
}

/* Why placement k cannot run here, as a reason code (the JSON documents'),
 * or NULL when it can. */
static const char *unavailable_code(const Kv *v, KvPlace k)
{
    switch (k) {
    case KV_LOCAL: return v->M > 1 ? "several_machines" : NULL;
    case KV_DEVICE: return v->cpu ? "no_devices" : v->M > 1 ? "several_machines" : NULL;
    case KV_NCCL:
        return v->cpu     ? "no_devices"
               : v->M > 1 ? "several_machines"
               : v->D < 2 ? "one_device"
                          : NULL;
    case KV_DIST_SYNC: /* on CPUs, the processes of one machine too (mpirun decides how many) */
        return v->M < 2 && !v->cpu ? "one_gpu_machine" : NULL;
    default: return "unknown";
    }
}

/* The same in words (the text dumps and messages). */
static const char *unavailable(const Kv *v, KvPlace k)
{
    static const char *const words[][2] = {
        {"several_machines", "several machines: only dist_sync crosses the network"},
        {"no_devices", "no devices (a CPU-only machine)"},
        {"one_device", "one device: nothing to all-reduce (device updates in place)"},
        {"one_gpu_machine", "one machine of GPUs: no network to cross (nccl)"},
    };
    const char *code = unavailable_code(v, k);
    for (int i = 0; code && i < (int)(sizeof words / sizeof words[0]); i++)
        if (strcmp(words[i][0], code) == 0)
            return words[i][1];
    return code;
}

/* Buckets of at most cap bytes (a bucket closes once it reaches cap), in
 * completion order; returns the count. */
static int make_buckets(const Kv *v, int64_t cap, Bucket *out)
{
    int n = 0;
    for (int i = 0; i < v->ng; i++) {
        const Grad *x = &v->g[i];
        if (n == 0 || out[n - 1].wire >= cap) {
            memset(&out[n], 0, sizeof out[n]);
            out[n++].first = i;
        }
        Bucket *b = &out[n - 1];
        b->n++;
        b->elems = add_sat(b->elems, x->elems);
        b->wire = add_sat(b->wire, x->wire);
        b->wire16 = add_sat(b->wire16, x->wire16);
        b->weight = add_sat(b->weight, x->weight);
        b->upd = add_sat(b->upd, x->upd);
        b->upd_unfused = add_sat(b->upd_unfused, x->upd_unfused);
        b->cvt16 = add_sat(b->cvt16, x->cvt16);
        b->ready = b->ready > x->ready ? b->ready : x->ready;
    }
    return n;
}

/* The pipeline: each stage a FIFO resource; a bucket enters a stage when it
 * left the previous one and the stage finished the bucket before it (and,
 * for a stage on the computing device, when backward is over).  Fills
 * busy[s] with each stage's total time when busy is not NULL. */
static double simulate(const Kv *v, KvPlace k, const Bucket *b, int nb, double *busy)
{
    double compute = v->fwd + v->bwd, free_at[MAX_STAGES] = {0}, end = 0;
    if (busy)
        memset(busy, 0, sizeof(double) * MAX_STAGES);
    for (int i = 0; i < nb; i++) {
        Stages s = stages(v, k, &b[i]);
        double t = b[i].ready;
        for (int j = 0; j < s.n; j++) {
            if (s.after_compute[j] && t < compute)
                t = compute;
            if (t < free_at[j])
                t = free_at[j];
            t += s.cost[j];
            free_at[j] = t;
            if (busy)
                busy[j] += s.cost[j];
        }
        end = t > end ? t : end;
    }
    return end > compute ? end : compute;
}

#define MIB (1024.0 * 1024.0)
/* the bucket caps the search tries, MiB (0: one bucket); 25 first, as
 * PyTorch DDP's default, so it wins ties */
static const double caps_mib[] = {25, 1, 2, 4, 8, 16, 32, 64, 0};
#define NCAPS ((int)(sizeof caps_mib / sizeof caps_mib[0]))

static int64_t cap_bytes(double mib) { return mib <= 0 ? INT64_MAX : (int64_t)(mib * MIB); }

/* best step time of placement k over the caps tried; *cap_out the cap */
static double best_cap(const Kv *v, KvPlace k, Bucket *tmp, double *cap_out, int *nb_out)
{
    double best = -1;
    for (int c = 0; c < NCAPS; c++) {
        double mib = v->o->bucket_mb >= 0 ? v->o->bucket_mb : caps_mib[c];
        int nb = make_buckets(v, cap_bytes(mib), tmp);
        double t = simulate(v, k, tmp, nb, NULL);
        if (best < 0 || t < best) {
            best = t;
            *cap_out = mib;
            *nb_out = nb;
        }
        if (v->o->bucket_mb >= 0)
            break;
    }
    return best;
}

/* ---- output ---------------------------------------------------------------------- */

static void write_plan(const Kv *v, Program *p, KvPlace k, double mib, const KvResult *r)
{
    KvPlan *kv = &p->kv;
    memset(kv, 0, sizeof *kv);
    kv->set = true;
    kv->place = k;
    kv->wire = v->wire;
    kv->devices = v->D;
    kv->machines = v->M;
    kv->bucket_cap = cap_bytes(mib);
    Bucket *b = malloc(sizeof(Bucket) * ((size_t)v->ng + 1));
    if (!b)
        DIE("out of memory");
    kv->nbuckets = make_buckets(v, kv->bucket_cap, b);
    kv->buckets = arena_alloc(&p->a, sizeof(KvBucket) * ((size_t)kv->nbuckets + 1));
    for (int i = 0; i < kv->nbuckets; i++) {
        KvBucket *o = &kv->buckets[i];
        o->bytes = b[i].wire;
        o->nbufs = b[i].n;
        o->bufs = arena_alloc(&p->a, sizeof(int) * ((size_t)b[i].n + 1));
        for (int j = 0; j < b[i].n; j++)
            o->bufs[j] = v->g[b[i].first + j].buf;
    }
    for (int i = 0; i < KV_COUNT; i++)
        kv->step_us[i] = r->step_ms[i] < 0      ? -1
                         : r->step_ms[i] > 4e15 ? (int64_t)4e18 /* a thousand centuries */
                                                : (int64_t)llround(r->step_ms[i] * 1e3);
    free(b);
}

static void print_table(FILE *f, const Kv *v, const Graph *g, const KvResult *r, KvPlace chosen,
                        bool named)
{
    fprintf(f, "kvstore: model %s on %s: %d %s x %d machine%s, batch %lld per %s\n", g->model,
            v->m->name, v->D, v->cpu ? "process(es)" : "device(s)", v->M, v->M > 1 ? "s" : "",
            (long long)v->batch, v->cpu ? "process" : "device");
    fprintf(f, "  gradients: %d tensors, %lld elements, %lld bytes on the wire (%s%s)\n", v->ng,
            (long long)r->params, (long long)r->grad_bytes, v->gdt ? "16-bit ones as " : "all fp32",
            v->gdt ? dtype_short(v->wire) : "");
    fprintf(f, "  optimizer: %s, %d fp32 state tensor(s)%s%s; host update %s, device update %s\n",
            v->opt, v->o->nstate, v->mp ? ", fp32 masters (multi-precision)" : "",
            v->dynamic ? ", dynamic loss scale" : "",
            v->m->host_fused_mp ? "fused" : "NOT fused", v->m->device_fused_mp ? "fused" : "NOT fused");
    if (v->cpu)
        fprintf(f,
                "  compute: forward %.3f ms + backward %.3f ms = %.3f ms (%.4g GFLOP/sample "
                "forward, backward 2x, at %g TFLOP/s)\n",
                v->fwd * 1e3, v->bwd * 1e3, r->compute_ms, v->fwd_flops / 1e9,
                v->m->host_tflops / v->D);
    else
        fprintf(f,
                "  compute: forward %.3f ms + backward %.3f ms = %.3f ms (the GPU cost model's "
                "calls on %s, the middle of its range: docs/gpucost.md)\n",
                v->fwd * 1e3, v->bwd * 1e3, r->compute_ms, v->m->name);
    fprintf(f, "  %-10s %12s %12s %12s %8s %9s\n", "placement", "step ms", "exposed ms", "samples/s",
            "buckets", "cap MiB");
    double total = (double)v->batch * v->D * v->M;
    for (int k = 0; k < KV_COUNT; k++) {
        if (r->step_ms[k] < 0) {
            fprintf(f, "  %-10s %12s   not available: %s\n", kv_place_name((KvPlace)k), "-",
                    unavailable(v, (KvPlace)k));
            continue;
        }
        char cap[32];
        if (r->bucket_mib[k] <= 0)
            snprintf(cap, sizeof cap, "all");
        else
            snprintf(cap, sizeof cap, "%g", r->bucket_mib[k]);
        fprintf(f, "  %-10s %12.3f %12.3f %12.1f %8d %9s%s\n", kv_place_name((KvPlace)k),
                r->step_ms[k], r->step_ms[k] - r->compute_ms, total / (r->step_ms[k] * 1e-3),
                r->nbuckets[k], cap, k == (int)chosen ? "  <- chosen" : "");
    }
    if (r->step_ms[KV_LOCAL] > 0 && r->step_ms[KV_DEVICE] > 0)
        fprintf(f, "  local/device step-time ratio: %.3f\n",
                r->step_ms[KV_LOCAL] / r->step_ms[KV_DEVICE]);
    if (named && chosen != r->best)
        fprintf(f, "  choice: %s (named by --kvstore): %.2fx the %.3f ms of %s, the cheapest\n",
                kv_place_name(chosen), r->step_ms[chosen] / r->step_ms[r->best],
                r->step_ms[r->best], kv_place_name(r->best));
    else
        fprintf(f, "  choice: %s: the cheapest%s\n", kv_place_name(chosen),
                named ? " (and named by --kvstore)" : " (--kvstore=auto)");
}

static void explain_wire(FILE *f, const Kv *v)
{
    int n = v->D * v->M;
    if (v->wire == DT_F16)
        fprintf(f, "  wire f16: the %d-way sum rounds each partial sum to fp16 (unit roundoff 2^-11 "
                   "= 4.9e-4; relative error at most %d x 2^-11 for a sum of like-signed terms); a "
                   "partial sum past 65504 becomes inf, which the dynamic loss scale's check sees on "
                   "every rank, so the step is skipped everywhere\n", n, n > 1 ? n - 1 : 0);
    else if (v->wire == DT_BF16)
        fprintf(f, "  wire bf16: as fp16 but unit roundoff 2^-8 = 3.9e-3 and fp32's range: %d-way "
                   "sums lose up to %d x 2^-8 relative\n", n, n > 1 ? n - 1 : 0);
    else
        fprintf(f, "  wire f32: the %d-way sum rounds to fp32 (2^-24 per addition); twice the "
                   "bytes of fp16\n", n);
}

static void explain(FILE *f, const Kv *v, const KvResult *r, KvPlace chosen)
{
    fprintf(f, "kvstore: why %s\n", kv_place_name(chosen));
    fprintf(f, "  the step takes max(forward + backward, the end of the last bucket's last stage);\n"
               "  buckets are filled in the order backward completes the gradients and flow\n"
               "  through their placement's stages, each a FIFO resource; stages on the device\n"
               "  that computes wait for backward to end\n");
    Bucket *b = malloc(sizeof(Bucket) * ((size_t)v->ng + 1));
    if (!b)
        DIE("out of memory");
    static const char *const names[KV_COUNT][MAX_STAGES] = {
        {"device->host copy", "host sum + update", "host->device copy", ""},
        {"reduce to owners", "update of each share", "broadcast of weights", ""},
        {"ring all-reduce", "update on every device", "", ""},
        {"reduce-scatter in machine", "all-reduce over network", "all-gather in machine", "update"},
    };
    for (int k = 0; k < KV_COUNT; k++) {
        if (r->step_ms[k] < 0)
            continue;
        int nb = make_buckets(v, cap_bytes(r->bucket_mib[k]), b);
        double busy[MAX_STAGES];
        simulate(v, (KvPlace)k, b, nb, busy);
        Stages s = stages(v, (KvPlace)k, &b[0]);
        if (v->cpu && k == KV_LOCAL)
            fprintf(f, "  %s (%d buckets): host sum + update %.3f ms (after backward)", kv_place_name((KvPlace)k), nb, busy[0] * 1e3);
        else {
            fprintf(f, "  %s (%d buckets):", kv_place_name((KvPlace)k), nb);
            int j = 0;
            for (int st = 0; st < MAX_STAGES && j < s.n; st++) {
                /* device without a second device skips its copies */
                if (k == KV_DEVICE && v->D < 2 && st != 1)
                    continue;
                fprintf(f, "%s %s %.3f ms", j ? "," : "", names[k][st], busy[j] * 1e3);
                j++;
            }
        }
        fprintf(f, "; step %.3f ms, %.3f ms more than compute\n", r->step_ms[k],
                r->step_ms[k] - r->compute_ms);
    }
    free(b);
    if (r->step_ms[KV_LOCAL] > 0 && r->step_ms[KV_DEVICE] > 0)
        fprintf(f, "  local/device: %.3f; for comparison, not calibration: the MXNet 1.x report that "
                   "started ampc saw 800/650 = 1.23 (ResNet-50, multi_precision NAG, 4 GPUs)\n",
                r->step_ms[KV_LOCAL] / r->step_ms[KV_DEVICE]);
    explain_wire(f, v);
    if (r->step_ms[chosen] > r->step_ms[r->best])
        fprintf(f, "  %s was named; %s would take %.3f ms (%.2fx faster)\n", kv_place_name(chosen),
                kv_place_name(r->best), r->step_ms[r->best], r->step_ms[chosen] / r->step_ms[r->best]);
    else
        fprintf(f, "  %s has the lowest predicted step time\n", kv_place_name(chosen));
}

/* ---- the entry point ---------------------------------------------------------------- */

static int64_t train_batch(const Graph *g)
{
    const ConfigEntry *e = train_entry(g, "batch_size");
    return e && e->val->kind == CV_INT && e->val->i > 0 ? e->val->i : 32;
}

bool kvstore_place(const Graph *train, Program *p, const KvMachine *m, const KvOptions *o, Diag *d,
                   FILE *dump, FILE *explain_out, KvResult *res)
{
    KvPlace named = KV_COUNT;
    if (o->kvstore && strcmp(o->kvstore, "auto") != 0) {
        for (int k = 0; k < KV_COUNT; k++)
            if (strcmp(o->kvstore, kv_place_name((KvPlace)k)) == 0)
                named = (KvPlace)k;
        if (named == KV_COUNT) {
            diag_plain_error(d, "--kvstore must be auto, local, device, nccl or dist_sync, not '%s'",
                             o->kvstore);
            return false;
        }
    }
    Kv v = {.m = m, .o = o};
    v.cpu = m->devices == 0;
    v.D = o->devices > 0 ? o->devices : v.cpu ? 1 : m->devices;
    v.M = o->machines > 0 ? o->machines : 1;
    v.batch = o->batch > 0 ? o->batch : train_batch(train);
    v.opt = optimizer_name(train);
    v.dynamic = o->dynamic_scale;
    /* 16-bit gradients travel in their own dtype unless --kv-wire says */
    for (int q = 0; q < p->nparams && !v.gdt; q++)
        if (p->param_grad[q] >= 0 && dtype_size(p->buf[p->param_grad[q]].dtype) < 4)
            v.gdt = p->buf[p->param_grad[q]].dtype;
    v.wire = o->wire != DT_UNKNOWN ? o->wire : v.gdt ? v.gdt : DT_F32;
    collect(&v, train, p);
    KvResult r = {.compute_ms = (v.fwd + v.bwd) * 1e3, .best = KV_COUNT};
    for (int i = 0; i < v.ng; i++)
        r.params = add_sat(r.params, v.g[i].elems), r.grad_bytes = add_sat(r.grad_bytes, v.g[i].wire);
    Bucket *tmp = malloc(sizeof(Bucket) * ((size_t)v.ng + 1));
    if (!tmp)
        DIE("out of memory");
    /* preference on ties: the update stays on the devices; then the one
     * process that needs no MPI */
    static const KvPlace order[] = {KV_NCCL, KV_DEVICE, KV_LOCAL, KV_DIST_SYNC};
    for (int i = 0; i < KV_COUNT; i++) {
        KvPlace k = order[i];
        r.step_ms[k] = -1;
        if (unavailable(&v, k))
            continue;
        r.step_ms[k] = best_cap(&v, k, tmp, &r.bucket_mib[k], &r.nbuckets[k]) * 1e3;
        if (r.best == KV_COUNT || r.step_ms[k] < r.step_ms[r.best])
            r.best = k;
    }
    free(tmp);
    bool ok = true;
    if (named != KV_COUNT && r.step_ms[named] < 0) {
        diag_plain_error(d, "--kvstore=%s is not available on %d x %s (%d machine%s): %s",
                         o->kvstore, v.D, m->name, v.M, v.M > 1 ? "s" : "", unavailable(&v, named));
        ok = false;
    }
    KvPlace chosen = named != KV_COUNT ? named : r.best;
    if (ok && chosen != r.best && r.step_ms[chosen] > 1.10 * r.step_ms[r.best])
        fprintf(stderr, "ampc: warning: --kvstore=%s: predicted %.3f ms per step, %.2fx the %.3f ms "
                        "of %s (the cheapest on %s)\n", o->kvstore, r.step_ms[chosen],
                r.step_ms[chosen] / r.step_ms[r.best], r.step_ms[r.best], kv_place_name(r.best),
                m->name);
    if (ok) {
        write_plan(&v, p, chosen, r.bucket_mib[chosen], &r);
        if (dump)
            print_table(dump, &v, train, &r, chosen, named != KV_COUNT);
        if (explain_out)
            explain(explain_out, &v, &r, chosen);
    }
    if (res) { /* what the JSON documents say (dump.c, report.c) */
        r.chosen = chosen;
        r.named = named != KV_COUNT;
        for (int k = 0; k < KV_COUNT; k++)
            r.unavailable[k] = unavailable_code(&v, (KvPlace)k);
        r.devices = v.D, r.machines = v.M, r.batch = v.batch, r.ngrads = v.ng;
        r.fwd_ms = v.fwd * 1e3, r.bwd_ms = v.bwd * 1e3, r.wire = v.wire, r.cpu = v.cpu;
        r.optimizer = v.opt;
        r.nstate = o->nstate;
        r.mp = v.mp, r.dynamic = v.dynamic;
        snprintf(r.machine, sizeof r.machine, "%s", m->name);
        *res = r;
    }
    free(v.g);
    return ok;
}
