/* main.c - the ampc driver: flags, then the passes as a straight list with
 * dumps (and, with --verify or AMPC_VERIFY=1, the IR verifier) in between. */
#include "driver.h"
#include "../codegen/codegen.h"
#include "../ir/plan.h"
#include "../passes/kvstore.h"
#include "../runtime/fileio.h"
#include "../runtime/settings.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef struct {
    const char *input;
    const char *output;
    DumpOptions dump; /* --dump (repeatable), --dump-dir, --dump-format, --dump-ids */
    const char *model;
    bool from_ir, report, verify, source_only; /* source_only: -S */
    bool report_json;                          /* --report=json */
    const char *expect;     /* --expect FILE: assertions on the result (expect.c) */
    bool expect_update;     /* --expect-update: rewrite its exact values */
    Provenance prov;        /* what every dump and report says about how it was made */
    const char *target;     /* --target=cpu|cuda|auto as given (NULL: auto) */
    const char *kernels;    /* --kernels=cpu|cuda (testing), NULL: the target's */
    Target kernel_target;   /* whose kernels the program calls (resolved) */
    char target_why[320];   /* --target=auto: why it chose the CPU ("" when it did not) */
    const char *argv0;
    int64_t batch;
    int64_t shuffle_seed;   /* > 0: store the graph in a random topological order */
    bool time_passes;       /* --time-passes: per-pass wall time to stderr */
    const char *optimizer;  /* --optimizer: overrides the train block's */
    const char *loss_scale; /* --loss-scale: likewise */
    bool no_memplan;        /* --no-memplan: every value its own buffer */
    bool no_inplace;        /* --no-inplace: the plan shares buffers but never in place */
    const char *check_program; /* --check-program FILE: read a program dump back and prove it */
    bool from_mxnet;        /* --from-mxnet FILE: the input is MXNet symbol JSON */
    const char *shapes[16]; /* --input-shape NAME=D0,... (repeatable) */
    int nshapes;
    const char *loss;       /* --loss=softmax */
    const char *emit_sym;   /* --emit-sym FILE: the imported model as ampc source */
    const char *emit_mxnet; /* --emit-mxnet-json FILE: the forward graph as MXNet symbol JSON */
    PassOptions pass;
    KvOptions kv;           /* --kvstore, --devices, --machines, --kv-bucket-mb, --kv-wire */
    const char *machine;    /* --machine=NAME|FILE */
    bool kv_flags;          /* any of those given: --dump=program carries the placement */
    bool kv_explain;        /* --explain=kvstore */
    bool kv_bucket_set;     /* --kv-bucket-mb given (else the pass sizes buckets) */
    bool mpi;               /* --mpi: the program runs under mpirun (links Open MPI) */
    const char *calibrate;  /* --calibrate PROFILE: the GPU cost model against a measured run */
    Profile profile;        /* its calls, read before the passes run */
    char cc_flags[64];      /* -O0..-O3, -g: for the program's C compiler */
    bool verbose;           /* -v: a one-line summary of what was compiled */
    const char *cmdline;    /* how ampc was called, no absolute paths (a program's --version) */
} Options;

static void usage(FILE *f)
{
    fputs("usage: ampc FILE.sym [options]\n"
          "       ampc --from-ir FILE.ir [options]\n"
          "\n"
          "Compiles a model definition into a mixed-precision training program.\n"
          "\n"
          "Without -o, -S, --dump or --report it only checks FILE (-v says what it found).\n"
          "\n"
          "options:\n"
          "  -o FILE                 write the training program to FILE\n"
          "  -S                      write its C source only (to -o, or MODEL.c)\n"
          "  -O0|-O1|-O2|-O3, -g     passed to the C compiler of the program (default -O2,\n"
          "                          or $CFLAGS); ampc itself has no optimisation levels\n"
          "  -v                      one line on what was compiled (model, nodes, parameters)\n"
          "  --target=cpu|cuda|auto  the backend: cpu (portable C with OpenBLAS), cuda (an\n"
          "                          NVIDIA GPU: cuDNN, cuBLASLt, NCCL; docs/backend-cuda.md),\n"
          "                          auto (default: cuda when this machine has a usable GPU)\n"
          "  --kernels=cpu           testing: a --target=cuda plan (layouts, fusions, memory\n"
          "                          plan) calling the CPU runtime's kernels\n"
          "  --model=NAME            the model to build (default: the first in FILE)\n"
          "  --dump=PASS|all         print the IR after PASS (or after every pass and stage;\n"
          "                          repeatable)\n"
          "  --dump=memplan          the training step's memory plan: lifetimes, sizes, offsets\n"
          "  --dump=program          the lowered program: buffers, each step's calls\n"
          "  --check-program FILE    read a --dump=program text back and prove its plan\n"
          "  --no-memplan            give every value its own buffer (no sharing, no reuse)\n"
          "  --no-inplace            share buffers, but never write a value over its input\n"
          "  --no-schedule           run nodes in the order the passes left (no reordering\n"
          "                          for a lower peak)\n"
          "  --dump-dir=DIR          write dumps to DIR/NN.PASS.ir (.txt, .dot, .json) instead\n"
          "  --dump-format=text|dot|json\n"
          "                          IR text (readable back), Graphviz, or JSON (docs/schema/)\n"
          "  --dump-ids=positions|names\n"
          "                          IR text: refer to values by position (%12, default) or\n"
          "                          by name (%stage1_conv1): an inserted node changes only\n"
          "                          its own lines\n"
          "  --from-ir FILE.ir       start from a dump instead of a .sym file\n"
          "  --from-mxnet FILE.json  start from an MXNet symbol JSON file (docs/mxnet.md)\n"
          "  --input-shape NAME=D0,D1,...\n"
          "                          its input's shape (D0, the batch, becomes N; repeatable)\n"
          "  --loss=softmax          end the imported model in SoftmaxOutput with input 'label'\n"
          "  --emit-sym FILE         write the imported model as ampc source\n"
          "  --emit-mxnet-json FILE  write the forward graph (after --amp's rewrite) as MXNet\n"
          "                          symbol JSON\n"
          "  --batch-size=N          bind the batch size N in reports and dumps\n"
          "  --amp=off|float16|bfloat16\n"
          "                          mixed precision (default: the train block's amp; fp16\n"
          "                          and bf16 are the same as float16 and bfloat16)\n"
          "  --optimizer=SPEC        e.g. nag(momentum=0.9, wd=1e-4, multi_precision=true)\n"
          "  --loss-scale=SPEC       dynamic | dynamic(init=..., ...) | off | a number\n"
          "                          (both override the train block; docs/training.md)\n"
          "  --amp-fp16=Op,...       run these ops in the low precision\n"
          "  --amp-fp32=Op,...       run these ops in fp32\n"
          "  --amp-exclude=name,...  keep these nodes in fp32\n"
          "  --amp-placement=optimal|greedy\n"
          "                          dtypes of follow/widest ops: fewest bytes converted\n"
          "                          (default), or each follows its inputs\n"
          "  --explain[=NAME]        say why each node (or NAME) got its dtype, and (with -o,\n"
          "                          -S or --dump=fuse) list the fusions made\n"
          "  --no-fuse=NAME,...|all  turn fusions off (repeatable): bn_relu (BatchNorm +\n"
          "                          relu), add_relu (elemwise_add + relu),\n"
          "                          bn_add_relu (BatchNorm + add + relu; needs add_relu),\n"
          "                          cast_softmax_output (AMP's cast of the logits into the\n"
          "                          loss head), softmax_output_bwd_cast (the cast of its\n"
          "                          gradient into its backward), conv_bn_stats; docs/codegen.md\n"
          "  --fuse=NAME,...         turn on the fusions off by default (repeatable):\n"
          "                          conv_bn_stats (a 16-bit convolution writing the\n"
          "                          statistics of the training BatchNorm reading it;\n"
          "                          --target=cuda; not yet run on a GPU: docs/backend-cuda.md)\n"
          "  --report[=text|json]    op counts, parameters, FLOPs, activation bytes, casts,\n"
          "                          the memory plan, the placement (docs/report.md)\n"
          "  --expect FILE           check the result against FILE's assertions (docs/ci.md)\n"
          "  --expect-update         rewrite FILE's exact values from this compilation\n"
          "  --kvstore=auto|local|device|nccl|dist_sync\n"
          "                          where gradients are summed and the optimizer runs\n"
          "                          (default auto: the cheapest the cost model predicts;\n"
          "                          docs/kvstore.md); --dump=kvstore, --explain=kvstore\n"
          "  --machine=NAME|FILE     the machine the cost models assume: cpu (default;\n"
          "                          --target=cuda: h200x8 with --devices=1), titanx-pcie3,\n"
          "                          h100x8, h200x8, h100x8-100g, h100, h200, a100, or a file\n"
          "  --devices=N             devices per machine (CPU only: processes)\n"
          "  --machines=M            machines (default 1)\n"
          "  --kv-bucket-mb=X        gradient bucket size in MiB (0: one bucket; default:\n"
          "                          the size the model predicts fastest)\n"
          "  --kv-wire=f16|f32       dtype of 16-bit gradients on the wire (default: theirs)\n"
          "  --dump=gpu-cost         the GPU cost model (--target=cuda): every call of a step\n"
          "                          with its bytes, FLOPs, threads, bound and time range\n"
          "                          (docs/gpucost.md); --report adds its summary\n"
          "  --calibrate PROFILE     the cost model against a run's --json-log profile record,\n"
          "                          per call family, with fitted efficiencies (--target=cuda)\n"
          "  --mpi                   build the program for mpirun: one process per rank, the\n"
          "                          gradients all-reduced over MPI (links Open MPI; implied\n"
          "                          by --kvstore=dist_sync; docs/kvstore.md)\n"
          "  --verify                check IR invariants after every pass\n"
          "  --time-passes           print the time each pass takes (stderr)\n"
          "  --shuffle-seed=K        testing: store the graph in a random topological order\n"
          "  --list-ops              the ops a model can call, one line each (docs/ops.md)\n"
          "  --describe-op=NAME      an op's inputs, attributes, shape rule, AMP class, kernels\n"
          "  -h, --help, --version\n"
          "       ampc diff A B [options]   (ampc diff --help; docs/ci.md)\n"
          "\n"
          "passes (--dump names):",
          f);
    for (int i = 0; i < pass_count; i++)
        fprintf(f, " %s", pass_pipeline[i].name);
    fputs("\nstages after them (--dump names):", f);
    for (int i = pass_count; i < stage_count; i++)
        fprintf(f, " %s", pass_pipeline[i].name);
    fputc('\n', f);
}

/* settings.h's number grammar: decimal, no hex, no spaces */
static bool parse_int(const char *s, int64_t *out)
{
    return rt_parse_i64(s, INT64_MIN, INT64_MAX, out);
}

/* the kvstore flags, in the order of their enum (docs/kvstore.md) */
static bool kv_option(int which, const char *arg, Options *o, Diag *d)
{
    static const char *const names[] = {"--kvstore", "--machine", "--devices", "--machines",
                                        "--kv-bucket-mb", "--kv-wire"};
    int64_t n;
    o->kv_flags = true;
    switch (which) {
    case 0: o->kv.kvstore = arg; return true; /* checked by the pass, with the rest */
    case 1: o->machine = arg; return true;
    case 2:
    case 3:
        if (!parse_int(arg, &n) || n < 1 || n > 65536) {
            diag_plain_error(d, "%s must be an integer from 1 to 65536, not '%s'", names[which], arg);
            return false;
        }
        *(which == 2 ? &o->kv.devices : &o->kv.machines) = (int)n;
        return true;
    case 4:
        o->kv_bucket_set = true;
        if (!rt_parse_f64(arg, 0, 65536, &o->kv.bucket_mb)) {
            diag_plain_error(d, "--kv-bucket-mb must be a number of MiB from 0 to 65536, not '%s'",
                             arg);
            return false;
        }
        return true;
    default:
        o->kv.wire = strcmp(arg, "f16") == 0 ? DT_F16 : strcmp(arg, "f32") == 0 ? DT_F32 : DT_UNKNOWN;
        if (o->kv.wire == DT_UNKNOWN) {
            diag_plain_error(d, "--kv-wire must be f16 or f32, not '%s'", arg);
            return false;
        }
        return true;
    }
}

/* --dump, --dump-dir, --dump-format, --dump-ids, in the order of their enum */
static bool dump_option(int which, const char *arg, Options *o, Diag *d)
{
    DumpOptions *u = &o->dump;
    switch (which) {
    case 0:
        if (u->nnames == DUMP_MAX) {
            diag_plain_error(d, "--dump given more than %d times", DUMP_MAX);
            return false;
        }
        u->names[u->nnames++] = arg;
        return true;
    case 1: u->dir = arg; return true;
    case 2:
        u->format = strcmp(arg, "text") == 0   ? DF_TEXT
                    : strcmp(arg, "dot") == 0  ? DF_DOT
                    : strcmp(arg, "json") == 0 ? DF_JSON
                                               : (DumpFormat)-1;
        if ((int)u->format < 0) {
            diag_plain_error(d, "--dump-format must be text, dot or json, not '%s'", arg);
            return false;
        }
        return true;
    default:
        if (strcmp(arg, "names") && strcmp(arg, "positions")) {
            diag_plain_error(d, "--dump-ids must be positions or names, not '%s'", arg);
            return false;
        }
        u->ids_names = strcmp(arg, "names") == 0;
        return true;
    }
}

/* The dump flags together: each applies to a dump that is asked for. */
static bool dump_options_ok(const Options *o, Diag *d)
{
    const DumpOptions *u = &o->dump;
    for (int i = 0; i < u->nnames; i++)
        if (strcmp(u->names[i], "all") != 0 && pass_index(u->names[i]) < 0) {
            cli_unknown_dump(d, u->names[i]);
            return false;
        }
    const char *alone = u->dir ? "--dump-dir" : u->ids_names ? "--dump-ids" : NULL;
    if (alone && u->nnames == 0) {
        diag_plain_error(d, "%s applies to --dump: give --dump=PASS or --dump=all", alone);
        return false;
    }
    for (int i = 0; u->format == DF_DOT && i < u->nnames; i++)
        if (strcmp(u->names[i], "program") == 0 || strcmp(u->names[i], "kvstore") == 0 ||
            strcmp(u->names[i], "gpu-cost") == 0) {
            diag_plain_error(d, "--dump=%s has no Graphviz form (text or json)", u->names[i]);
            return false;
        }
    if (o->expect_update && !o->expect) {
        diag_plain_error(d, "--expect-update applies to --expect FILE");
        return false;
    }
    return true;
}

static int parse_options(int argc, char **argv, Options *o, Diag *d)
{
    enum { O_DUMP = 256, O_DUMP_DIR, O_DUMP_FORMAT, O_FROM_IR, O_BATCH, O_REPORT, O_HELP,
           O_VERSION, O_MODEL, O_VERIFY, O_AMP, O_AMP16, O_AMP32, O_AMPX, O_EXPLAIN, O_SHUFFLE, O_TARGET, O_OPTIMIZER, O_LOSS_SCALE, O_TIME, O_AMP_PLACE, O_NO_FUSE, O_FUSE };
    enum { O_NO_MEMPLAN = 400, O_NO_INPLACE, O_NO_SCHEDULE, O_CHECK_PROGRAM };
    enum { O_FROM_MXNET = 500, O_INPUT_SHAPE, O_LOSS, O_EMIT_SYM, O_EMIT_MXNET };
    enum { O_KVSTORE = 600, O_MACHINE, O_DEVICES, O_MACHINES, O_KV_BUCKET, O_KV_WIRE, O_MPI = 650,
           O_KERNELS = 700, O_CALIBRATE = 750 };
    enum { O_DUMP_IDS = 800, O_EXPECT, O_EXPECT_UPDATE };
    enum { O_LIST_OPS = 900, O_DESCRIBE_OP };
    static const struct option longs[] = {
        {"kvstore", required_argument, NULL, O_KVSTORE},
        {"mpi", no_argument, NULL, O_MPI},
        {"calibrate", required_argument, NULL, O_CALIBRATE},
        {"kernels", required_argument, NULL, O_KERNELS},
        {"machine", required_argument, NULL, O_MACHINE},
        {"devices", required_argument, NULL, O_DEVICES},
        {"machines", required_argument, NULL, O_MACHINES},
        {"kv-bucket-mb", required_argument, NULL, O_KV_BUCKET},
        {"kv-wire", required_argument, NULL, O_KV_WIRE},
        {"no-memplan", no_argument, NULL, O_NO_MEMPLAN},
        {"no-inplace", no_argument, NULL, O_NO_INPLACE},
        {"no-schedule", no_argument, NULL, O_NO_SCHEDULE},
        {"check-program", required_argument, NULL, O_CHECK_PROGRAM},
        {"from-mxnet", required_argument, NULL, O_FROM_MXNET},
        {"input-shape", required_argument, NULL, O_INPUT_SHAPE},
        {"loss", required_argument, NULL, O_LOSS},
        {"emit-sym", required_argument, NULL, O_EMIT_SYM},
        {"emit-mxnet-json", required_argument, NULL, O_EMIT_MXNET},
        {"dump", required_argument, NULL, O_DUMP},
        {"dump-dir", required_argument, NULL, O_DUMP_DIR},
        {"dump-format", required_argument, NULL, O_DUMP_FORMAT},
        {"dump-ids", required_argument, NULL, O_DUMP_IDS},
        {"expect", required_argument, NULL, O_EXPECT},
        {"expect-update", no_argument, NULL, O_EXPECT_UPDATE},
        {"from-ir", required_argument, NULL, O_FROM_IR},
        {"batch-size", required_argument, NULL, O_BATCH},
        {"report", optional_argument, NULL, O_REPORT},
        {"model", required_argument, NULL, O_MODEL},
        {"verify", no_argument, NULL, O_VERIFY},
        {"amp", required_argument, NULL, O_AMP},
        {"amp-fp16", required_argument, NULL, O_AMP16},
        {"amp-fp32", required_argument, NULL, O_AMP32},
        {"amp-exclude", required_argument, NULL, O_AMPX},
        {"amp-placement", required_argument, NULL, O_AMP_PLACE},
        {"explain", optional_argument, NULL, O_EXPLAIN},
        {"no-fuse", required_argument, NULL, O_NO_FUSE},
        {"fuse", required_argument, NULL, O_FUSE},
        {"shuffle-seed", required_argument, NULL, O_SHUFFLE},
        {"target", required_argument, NULL, O_TARGET},
        {"optimizer", required_argument, NULL, O_OPTIMIZER},
        {"time-passes", no_argument, NULL, O_TIME},
        {"loss-scale", required_argument, NULL, O_LOSS_SCALE},
        {"list-ops", no_argument, NULL, O_LIST_OPS},
        {"describe-op", required_argument, NULL, O_DESCRIBE_OP},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, ":o:SO::gW:vh", longs, &li)) != -1) {
        if (li >= 0 && c == longs[li].val) /* a flag that changes the output */
            provenance_note(&o->prov, longs[li].name, optarg);
        li = -1;
        switch (c) {
        case 'o': o->output = optarg; break;
        case 'S': o->source_only = true; break;
        case 'O':
        case 'g':
        case 'W':
            if (!cli_cc_flag(d, c, optarg, o->cc_flags, sizeof o->cc_flags))
                return 1;
            break;
        case 'v': o->verbose = true; break;
        case O_LIST_OPS: opref_list(stdout); return -1;
        case O_DESCRIBE_OP: return opref_describe(d, stdout, optarg) ? -1 : 1;
        case O_KVSTORE: case O_MACHINE: case O_DEVICES: case O_MACHINES: case O_KV_BUCKET:
        case O_KV_WIRE:
            if (!kv_option(c - O_KVSTORE, optarg, o, d))
                return 1;
            break;
        case O_MPI: o->mpi = true; break;
        case O_CALIBRATE: o->calibrate = optarg; break;
        case O_NO_MEMPLAN: o->no_memplan = true; break;
        case O_NO_INPLACE: o->no_inplace = true; break;
        case O_NO_SCHEDULE: o->pass.no_schedule = true; break;
        case O_CHECK_PROGRAM: o->check_program = optarg; break;
        case O_FROM_MXNET: o->from_mxnet = true, o->input = optarg; break;
        case O_INPUT_SHAPE:
            if (o->nshapes == (int)(sizeof o->shapes / sizeof o->shapes[0])) {
                diag_plain_error(d, "--input-shape given more than %d times",
                                 (int)(sizeof o->shapes / sizeof o->shapes[0]));
                return 1;
            }
            o->shapes[o->nshapes++] = optarg;
            break;
        case O_LOSS: o->loss = optarg; break;
        case O_EMIT_SYM: o->emit_sym = optarg; break;
        case O_EMIT_MXNET: o->emit_mxnet = optarg; break;
        case O_OPTIMIZER: o->optimizer = optarg; break;
        case O_TIME: o->time_passes = true; break;
        case O_LOSS_SCALE: o->loss_scale = optarg; break;
        case O_TARGET:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "auto")) {
                diag_plain_error(d, "--target must be cpu, cuda or auto, not '%s'", optarg);
                return 1;
            }
            o->target = optarg;
            break;
        case O_KERNELS:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                diag_plain_error(d, "--kernels must be cpu or cuda, not '%s'", optarg);
                return 1;
            }
            o->kernels = optarg;
            break;
        case O_DUMP:
        case O_DUMP_DIR:
        case O_DUMP_FORMAT:
        case O_DUMP_IDS:
            if (!dump_option(c == O_DUMP_IDS ? 3 : c - O_DUMP, optarg, o, d))
                return 1;
            break;
        case O_EXPECT: o->expect = optarg; break;
        case O_EXPECT_UPDATE: o->expect_update = true; break;
        case O_FROM_IR: o->from_ir = true, o->input = optarg; break;
        case O_BATCH:
            if (!parse_int(optarg, &o->batch) || o->batch < 1 || o->batch > INT32_MAX) {
                diag_plain_error(d, "--batch-size must be an integer from 1 to %d, not '%s'",
                                 INT32_MAX, optarg);
                return 1;
            }
            break;
        case O_REPORT:
            if (optarg && strcmp(optarg, "text") && strcmp(optarg, "json")) {
                diag_plain_error(d, "--report must be text or json, not '%s'", optarg);
                return 1;
            }
            o->report = true;
            o->report_json = optarg && strcmp(optarg, "json") == 0;
            break;
        case O_SHUFFLE:
            if (!parse_int(optarg, &o->shuffle_seed) || o->shuffle_seed < 1) {
                diag_plain_error(d, "--shuffle-seed must be a positive integer, not '%s'", optarg);
                return 1;
            }
            break;
        case O_MODEL: o->model = optarg; break;
        case O_VERIFY: o->verify = true; break;
        case O_AMP: o->pass.amp = optarg; break;
        case O_AMP16: o->pass.amp_fp16 = optarg; break;
        case O_AMP32: o->pass.amp_fp32 = optarg; break;
        case O_AMPX: o->pass.amp_exclude = optarg; break;
        case O_AMP_PLACE: o->pass.amp_placement = optarg; break;
        case O_EXPLAIN:
            if (optarg && strcmp(optarg, "kvstore") == 0)
                o->kv_explain = true;
            else
                o->pass.explain = true, o->pass.explain_name = optarg;
            break;
        case O_NO_FUSE:
            if (!fuse_disable(d, optarg, &o->pass.no_fuse))
                return 1;
            break;
        case O_FUSE:
            if (!fuse_enable(d, optarg, &o->pass.fuse))
                return 1;
            break;
        case 'h':
        case O_HELP: usage(stdout); return -1;
        case O_VERSION: cli_print_version(stdout); return -1;
        default: cli_bad_option(d, c, argc, argv, longs); return 1;
        }
    }
    for (; optind < argc; optind++) {
        if (o->input) {
            diag_plain_error(d, "more than one input file ('%s' and '%s')", o->input, argv[optind]);
            return 1;
        }
        o->input = argv[optind];
    }
    if (!o->input && !o->check_program) {
        diag_plain_error(d, "no input file (see ampc --help)");
        return 1;
    }
    if (o->from_mxnet && o->from_ir) {
        diag_plain_error(d, "--from-mxnet and --from-ir: give one input");
        return 1;
    }
    if (!o->from_mxnet && (o->nshapes || o->loss || o->emit_sym)) {
        diag_plain_error(d, "%s applies to a model imported with --from-mxnet",
                         o->nshapes ? "--input-shape" : o->loss ? "--loss" : "--emit-sym");
        return 1;
    }
    if (!dump_options_ok(o, d))
        return 1;
    if (o->kernels && (!o->target || strcmp(o->target, "cuda") != 0)) {
        diag_plain_error(d, "--kernels=%s applies to --target=cuda", o->kernels);
        return 1;
    }
    /* auto: cuda when this machine has a usable GPU and the CUDA runtime
     * library was built, else the CPU (said under --report) */
    bool cuda = o->target && strcmp(o->target, "cuda") == 0;
    if (!o->target || strcmp(o->target, "auto") == 0)
        cuda = cg_cuda_usable(o->argv0, o->target_why, sizeof o->target_why);
    if (cuda)
        o->target_why[0] = 0;
    o->pass.target = cuda ? TARGET_CUDA : TARGET_CPU;
    o->kernel_target = cuda && !(o->kernels && strcmp(o->kernels, "cpu") == 0) ? TARGET_CUDA
                                                                               : TARGET_CPU;
    o->prov.target = o->pass.target;
    o->prov.kernels = o->kernel_target;
    o->prov.input_kind = o->check_program ? "program"
                         : o->from_ir     ? "ir"
                         : o->from_mxnet  ? "mxnet-json"
                                          : "model";
    o->dump.prov = &o->prov;
    o->dump.d = d;
    bool gpu_cost = dump_named(&o->dump, "gpu-cost");
    if ((gpu_cost || o->calibrate) && o->kernel_target != TARGET_CUDA) {
        diag_plain_error(d, "%s prices the CUDA program: add --target=cuda",
                         gpu_cost ? "--dump=gpu-cost" : "--calibrate");
        return 1;
    }
    const char *env = getenv("AMPC_VERIFY");
    if (env && strcmp(env, "1") == 0)
        o->verify = true;
    return 0;
}

/* --from-mxnet: the JSON as ampc source (mxnet_json.c), elaborated as a
 * .sym file is; --emit-sym writes that source, and its path names it in
 * messages (else FILE.json.sym, which the note explains). */
static Graph *load_mxnet(const Options *o, Diag *d)
{
    MxImportOptions mo = {.shapes = o->shapes, .nshapes = o->nshapes, .loss = o->loss};
    size_t len;
    char *text = mxnet_import(d, o->input, NULL, 0, &mo, &len);
    if (!text)
        return NULL;
    char name[4200];
    snprintf(name, sizeof name, "%s.sym", o->input);
    Graph *g = NULL;
    if (!o->emit_sym || cg_write_file(d, o->emit_sym, text, len)) {
        ElabOptions eo = {.model = NULL};
        int nerr = d->nerr;
        g = frontend_elaborate(d, o->emit_sym ? o->emit_sym : name, text, len, &eo);
        if (!g && d->nerr > nerr && !o->emit_sym)
            fprintf(stderr, "ampc: note: '%s' is the ampc source the import of '%s' made: "
                            "write it with --emit-sym FILE\n", name, o->input);
    }
    free(text);
    return g;
}

static Graph *load_ir(const Options *o, Diag *d, int *done)
{
    int file = diag_load_file(d, o->input);
    if (file < 0) {
        diag_plain_error(d, "cannot open '%s': %s", o->input, diag_load_error(d));
        return NULL;
    }
    /* A hand-written graph (no banner) gets shapes and types inferred. */
    int after = frontend_dump_after(diag_file(d, file));
    *done = after < 0 ? 0 : after;
    Graph *g = ir_read(d, file);
    if (g && !train_settings_ok(g)) { /* a dump's train lines, as a model file's */
        graph_free(g);
        return NULL;
    }
    if (g && after >= 0 && !frontend_check_dump(g, after, &o->pass)) {
        graph_free(g);
        return NULL;
    }
    return g;
}

/* The train-block setting a flag overrides, checked with the training
 * program's own parser (the message names the flag). */
static bool override_train(Graph *g, const char *key, const char *flag, const char *text)
{
    if (!text)
        return true;
    ConfigVal *v = config_parse(g, flag, text);
    if (!v || !train_flag_ok(g, key, v, flag))
        return false;
    graph_set_train_entry(g, key, v);
    return true;
}

/* --amp is recorded in the graph's train block, as --optimizer and
 * --loss-scale are, so a dump carries the setting that shaped it and a
 * program built from it says so (docs/ir.md).  A dump the amp pass has
 * shaped keeps its own: a different --amp is an error, and the flags that
 * steer the amp pass are refused, where they would change nothing. */
static bool override_amp(Graph *g, const PassOptions *po, int done, const char *input)
{
    static const PassOptions none = {0};
    AmpOptions rec, flag;
    if (!amp_options_resolve(g, &none, &rec) || !amp_options_resolve(g, po, &flag))
        return false;
    const char *steer = po->amp_exclude     ? "--amp-exclude"
                        : po->amp_fp16      ? "--amp-fp16"
                        : po->amp_fp32      ? "--amp-fp32"
                        : po->amp_placement ? "--amp-placement"
                                            : NULL;
    if (done >= pass_index("amp") && steer) {
        diag_plain_error(g->diag,
                         "%s: '%s' is a dump after %s: the amp pass, which %s steers, "
                         "does not run on it",
                         steer, input, pass_pipeline[done].name, steer);
        return false;
    }
    if (done >= pass_index("amp") && po->amp && flag.target != rec.target) {
        diag_plain_error(g->diag,
                         "--amp=%s: '%s' is a dump after %s, made with amp %s (its "
                         "'train amp' line, off when it has none): a dump keeps the "
                         "settings that shaped it",
                         po->amp, input, pass_pipeline[done].name,
                         rec.target ? dtype_long(rec.target) : "off");
        return false;
    }
    if (done >= pass_index("amp")) { /* the pass that records it will not run */
        g->info.amp = rec.target;
        return true;
    }
    if (!po->amp)
        return true;
    ConfigVal *v = config_parse(g, "--amp", flag.target ? dtype_long(flag.target) : "off");
    if (!v)
        return false;
    graph_set_train_entry(g, "amp", v);
    return true;
}

/* -S without -o: MODEL.c, the input's base name with its extension
 * replaced by .c, in the current directory (as --help says). */
static const char *default_c_path(const char *input, char *buf, size_t cap)
{
    const char *base = strrchr(input, '/') ? strrchr(input, '/') + 1 : input;
    const char *dot = strrchr(base, '.');
    int n = dot && dot != base ? (int)(dot - base) : (int)strlen(base);
    snprintf(buf, cap, "%.*s.c", n, base);
    return buf;
}

/* --check-program FILE */
static int check_program(Options *o, Diag *d)
{
    int file = diag_load_file(d, o->check_program);
    if (file < 0) {
        diag_plain_error(d, "cannot read '%s': %s", o->check_program, diag_load_error(d));
        return 1;
    }
    provenance_hash(&o->prov, d, file + 1);
    Program p;
    bool ok = program_read(d, file, &p);
    if (ok && !program_verify(&p, stderr)) {
        diag_plain_error(d, "'%s': the program's plan does not hold (above)", o->check_program);
        ok = false;
    }
    if (ok && dump_wanted(&o->dump, "program")) {
        ok = dump_program(&o->dump, &p, NULL); /* read back and printed again: the same program */
    } else if (ok) {
        int calls = 0;
        for (int k = 0; k < STEP_COUNT; k++)
            calls += p.step[k].ncalls;
        printf("%s: model %s, %d buffers, %d calls: the plan holds for every batch size\n",
               o->check_program, p.model, p.nbuf, calls);
    }
    program_free(&p);
    return ok ? 0 : 1;
}

/* The one place that decides whether a program links the MPI engine: built
 * for mpirun (--mpi), or placed by the kvstore pass (--kvstore, the train
 * block's kvstore, or auto's choice with --machines) on dist_sync, or, on a
 * GPU, on nccl (NCCL's unique id is broadcast over MPI; docs/kvstore.md).
 * No other program links it. */
static bool links_mpi(const Options *o, const KvPlan *kv)
{
    bool placed = kv && kv->set;
    return o->mpi || (placed && kv->place == KV_DIST_SYNC) ||
           (placed && kv->place == KV_NCCL && o->kernel_target == TARGET_CUDA);
}

/* The C source is made in memory first, so a code generation error leaves
 * every file as it was; then -S writes it (to -o, or MODEL.c) and -o builds
 * the program (codegen/output.c: temporary files, never an input).  The
 * plans and the placement are the stages' (c). */
static bool generate(const Options *o, const Graph *g, Diag *d, const Compilation *c)
{
    char *text = NULL, buf[4096];
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        DIE("out of memory");
    const KvPlan *kv = c->placed ? &c->prog.kv : NULL;
    CgPlans plans;
    const CgPlans *mp = compilation_plans(c, &plans);
    CgPlans with_kv = mp ? *mp : (CgPlans){0};
    with_kv.kv = kv; /* a dist_sync placement gives the program its buckets */
    with_kv.kernels = o->kernel_target;
    cg_emit_set_model_hash(o->prov.sha256); /* the input's, as the dumps' provenance says */
    bool ok = cg_emit_c(m, g, &with_kv);
    if (fclose(m) != 0)
        DIE("out of memory");
    if (ok)
        cg_stamp_build_id(text, len);
    if (ok && o->source_only)
        ok = cg_write_file(d, o->output ? o->output : default_c_path(o->input, buf, sizeof buf),
                           text, len);
    else if (ok) {
        bool across = kv && kv->set && (kv->place == KV_NCCL || kv->place == KV_DIST_SYNC);
        if (o->mpi && o->kernel_target == TARGET_CUDA && !across) {
            /* mpirun would start ranks that each train alone on GPU 0 */
            diag_plain_error(d, "--mpi with --target=cuda: a GPU program's ranks all-reduce "
                                "their gradients with NCCL: add --kvstore=nccl (one machine, "
                                "--devices=N) or --kvstore=dist_sync (several)");
            free(text);
            return false;
        }
        cg_build_set_mpi(links_mpi(o, kv));
        cg_build_set_cuda(o->kernel_target == TARGET_CUDA);
        cg_build_set_cflags(o->cc_flags);
        cg_build_set_command_line(o->cmdline);
        ok = cg_build_program(d, text, len, o->output, o->argv0);
    }
    free(text);
    return ok;
}

static bool has_loss_head(const Graph *g)
{
    for (int i = 0; i < g->noutputs; i++)
        if (op_is_loss_head(g->nodes[g->outputs[i]]->op))
            return true;
    return false;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* What the graph passes and the stages are asked for. */
typedef struct {
    bool all;               /* --dump=all */
    bool program, kv, plan; /* the stages named: --dump=program, =kvstore, =memplan */
    bool gpu;               /* --dump=gpu-cost or --calibrate: the GPU cost model by name */
    int last_graph;         /* the last graph pass a --dump names */
} Wants;

static Wants wants_of(const Options *o)
{
    Wants w = {.last_graph = -1};
    for (int i = 0; i < o->dump.nnames; i++) {
        const char *n = o->dump.names[i];
        int k = pass_index(n);
        w.all |= strcmp(n, "all") == 0;
        w.program |= strcmp(n, "program") == 0;
        w.kv |= strcmp(n, "kvstore") == 0;
        w.plan |= strcmp(n, "memplan") == 0;
        w.gpu |= strcmp(n, "gpu-cost") == 0;
        if (k >= 0 && k < pass_count && k > w.last_graph)
            w.last_graph = k;
    }
    w.gpu |= o->calibrate != NULL;
    w.kv |= o->kv_explain || w.gpu;
    w.plan |= w.program || w.kv;
    return w;
}

/* A --dump of a graph pass the dump read with --from-ir is already past. */
static bool dumps_reachable(const Options *o, Diag *d, int done)
{
    for (int i = 0; i < o->dump.nnames; i++) {
        int k = pass_index(o->dump.names[i]);
        if (k >= 0 && k < pass_count && k < done) {
            diag_plain_error(d, "--dump=%s: '%s' is a dump after %s, a later pass",
                             o->dump.names[i], o->input, pass_pipeline[done].name);
            return false;
        }
    }
    return true;
}

static Graph *load_input(const Options *o, Diag *d, int *done)
{
    Graph *g;
    if (o->from_ir) {
        g = load_ir(o, d, done);
    } else if (o->from_mxnet) {
        g = load_mxnet(o, d);
    } else {
        ElabOptions eo = {.model = o->model};
        g = frontend_elaborate(d, o->input, NULL, 0, &eo);
        *done = 0;
    }
    if (!g) {
        size_t n = strlen(o->input);
        /* a likely mix-up of the two kinds of input */
        if (!o->from_ir && !o->from_mxnet && n > 3 && strcmp(o->input + n - 3, ".ir") == 0)
            fprintf(stderr, "ampc: note: '%s' looks like an IR dump: read it with --from-ir\n",
                    o->input);
        if (o->from_ir && n > 4 && strcmp(o->input + n - 4, ".sym") == 0)
            fprintf(stderr,
                    "ampc: note: '%s' looks like a model source: compile it without "
                    "--from-ir\n",
                    o->input);
    }
    return g;
}

/* --report on a GPU program whose machine has no device to price: the line
 * that says so (NULL when the report has the GPU cost model's lines) */
static const char *gpu_none(const Options *o, const Compilation *c)
{
    return o->kernel_target == TARGET_CUDA && c->placed && !c->priced ? c->kvr.machine : NULL;
}

/* --calibrate: the GPU cost model's calls against the profile's, a factor
 * per family (passes/gpucost.h) */
static bool calibrate(const Options *o, const Compilation *c)
{
    if (!c->priced) {
        diag_plain_error(o->dump.d, "--calibrate: the program was not priced");
        return false;
    }
    GcFit fit;
    if (!gpucost_fit(&c->gpu, o->profile.calls, o->profile.ncalls, &o->profile.phases, &fit,
                     stderr))
        return false;
    gpucost_print_fit(stdout, &c->gpu, &fit);
    return true;
}

/* --report and --expect: what the graph facts describe and what the stages
 * made; the report goes to stdout, the assertions are checked. */
static bool finish_report(const Options *o, const Graph *fwd, const char *after, const Graph *g,
                          const Compilation *c)
{
    Report r = {.graph = fwd ? fwd : g,
                .after = after,
                .batch = o->batch,
                .train = c->planned ? g : NULL,
                .plan = c->planned ? &c->plan[0] : NULL,
                .nstate = train_optimizer_nstate(g),
                .kv = c->placed ? &c->prog.kv : NULL,
                .kvr = &c->kvr,
                .gpu = c->priced ? &c->gpu : NULL,
                .gpu_none = gpu_none(o, c),
                .machine_arg = o->machine,
                .target = o->pass.target,
                .kernels = o->kernel_target,
                .target_why = o->target_why,
                .prov = &o->prov};
    if (o->report && o->report_json)
        report_json(stdout, &r);
    else if (o->report)
        report_text(stdout, &r);
    return !o->expect || expect_run(g->diag, o->expect, &r, g, o->expect_update);
}

/* The files this run writes name different files (runtime/fileio.c: by
 * device and inode, or the directory's and the name), or one would be
 * lost: -o or -S, --emit-sym, --emit-mxnet-json and the --dump-dir files
 * (of every pass and stage). */
static bool outputs_distinct(const Options *o, Diag *d)
{
    enum { MAXOUT = 64 };
    const char *path[MAXOUT + 4], *what[MAXOUT + 4];
    char dumps[MAXOUT][4200], cbuf[4096];
    int n = 0;
    if (o->source_only || o->output) {
        what[n] = o->source_only ? "-S" : "-o";
        path[n++] = o->output ? o->output : default_c_path(o->input, cbuf, sizeof cbuf);
    }
    what[n] = "--emit-sym", path[n++] = o->emit_sym;
    what[n] = "--emit-mxnet-json", path[n++] = o->emit_mxnet;
    for (int i = 0; o->dump.dir && i < stage_count && i < MAXOUT; i++)
        if (dump_wanted(&o->dump, pass_pipeline[i].name) &&
            dump_path(&o->dump, pass_pipeline[i].name, dumps[i], sizeof dumps[i]))
            what[n] = "--dump-dir", path[n++] = dumps[i];
    char err[9000];
    if (!rt_outputs_distinct(path, what, n, err, sizeof err)) {
        diag_plain_error(d, "%s", err);
        return false;
    }
    return true;
}

static int run(Options *o, Diag *d)
{
    if (o->check_program)
        return check_program(o, d);
    if (!outputs_distinct(o, d))
        return 1;
    if (o->calibrate && !profile_read(d, o->calibrate, &o->profile))
        return 1;
    if (o->calibrate && o->batch <= 0 && o->profile.batch <= 0) {
        diag_plain_error(d,
                         "--calibrate: '%s' gives no batch size (no start event): give the "
                         "run's --batch-size",
                         o->calibrate);
        return 1;
    }
    int done = 0;
    double times[32] = {0}, t0 = now_ms();
    Graph *g = load_input(o, d, &done);
    times[done] = now_ms() - t0;
    if (!g)
        return 1;
    provenance_hash(&o->prov, d, d->files.len); /* the input and its imports */
    Wants w = wants_of(o);
    if (!dumps_reachable(o, d, done)) {
        graph_free(g);
        return 1;
    }
    if (o->pass.explain && done >= pass_index("amp")) {
        diag_plain_error(d, "--explain: '%s' is a dump after %s: the amp pass, whose decisions "
                            "--explain gives, does not run on it", o->input,
                         pass_pipeline[done].name);
        graph_free(g);
        return 1;
    }
    g->info.bind_batch = o->batch;
    if (!override_train(g, "optimizer", "--optimizer", o->optimizer) ||
        !override_train(g, "loss_scale", "--loss-scale", o->loss_scale) ||
        !override_amp(g, &o->pass, done, o->input)) {
        graph_free(g);
        return 1;
    }
    if (o->shuffle_seed > 0)
        g = graph_shuffle(g, (uint64_t)o->shuffle_seed);
    bool ok = !o->verify || ir_verify(g, pass_pipeline[done].name);
    ok = ok && dump_graph(&o->dump, g, done);
    /* The forward passes always run; the training passes when a program, a
     * dump of them or what the stages make is asked for. */
    int forward_end = pass_index("cast-elide"), last = forward_end, reached = done;
    /* --emit-mxnet-json: the forward graph as it leaves cast-elide */
    if (ok && o->emit_mxnet && done >= forward_end)
        ok = mxnet_export(d, g, o->emit_mxnet);
    /* --report, --expect and the stages' dumps plan the training step of a
     * model that trains */
    bool plan_only = !o->output && !o->source_only && (o->report || o->expect || w.plan || w.kv);
    if (o->output || o->source_only || w.all || plan_only)
        last = pass_count - 1;
    else if (w.last_graph > last)
        last = w.last_graph;
    PassOptions po = o->pass;
    bool trains = has_loss_head(g);
    po.explain_training = last >= pass_index("fuse") && has_loss_head(g);
    po.predict = (o->output || o->source_only || w.program) && !has_loss_head(g);
    Graph *fwd = NULL; /* the forward graph the report describes */
    const char *fwd_after = pass_pipeline[done].name;
    for (int i = done + 1; ok && i <= last; i++) {
        /* --dump=all on a model that cannot train shows the forward passes */
        if (i > forward_end && !o->output && !o->source_only && (plan_only || w.all) &&
            !has_loss_head(g) && !po.predict)
            break;
        double t = now_ms();
        ok = pass_pipeline[i].run(&g, &po);
        times[i] = now_ms() - t;
        reached = i;
        if (ok && o->verify && !ir_verify(g, pass_pipeline[i].name))
            DIE("the IR verifier failed after %s", pass_pipeline[i].name);
        if (ok && o->verify && i >= pass_index("autodiff") && !training_graph_check(g, i))
            DIE("the training graph differs from autodiff's own after %s", pass_pipeline[i].name);
        ok = ok && dump_graph(&o->dump, g, i);
        if (ok && i == forward_end && o->emit_mxnet)
            ok = mxnet_export(d, g, o->emit_mxnet);
        if (ok && i == forward_end && (o->report || o->expect)) {
            fwd = graph_copy(g);
            fwd_after = pass_pipeline[i].name;
        }
    }
    if (!fwd)
        fwd_after = pass_pipeline[reached].name;
    if (ok && (w.plan || w.kv) && !g->infer) {
        if (w.plan && !o->kv_explain && !w.kv)
            diag_plain_error(d, "--dump=%s needs a model that trains (a loss head)",
                             w.program ? "program" : "memplan");
        else
            diag_plain_error(d, "%s needs a model that trains (a loss head)",
                             o->kv_explain  ? "--explain=kvstore"
                             : o->calibrate ? "--calibrate"
                             : w.gpu        ? "--dump=gpu-cost"
                                            : "--dump=kvstore");
        ok = false;
    }
    /* the stages, on the scheduled graph */
    /* a placement asked for by name (errors are errors): a kvstore flag, or
     * the train block's kvstore key (the flags override it, as every key) */
    bool kv_named = o->kv_flags || train_kvstore(g);
    bool named = w.program || w.kv || kv_named;
    bool gpu_report = (o->report || o->expect) && o->kernel_target == TARGET_CUDA;
    Compilation c = {.g = g,
                     .dump = &o->dump,
                     .no_memplan = o->no_memplan,
                     .no_inplace = o->no_inplace,
                     .kernels = o->kernel_target,
                     .machine = o->machine,
                     .kv = o->kv,
                     .kv_bucket_set = o->kv_bucket_set,
                     .want_program = w.program || w.all,
                     .want_kv = w.kv || w.all || o->report || o->expect || kv_named,
                     .want_gpu = w.gpu || w.all || gpu_report,
                     .gpu_named = o->calibrate ? "--calibrate"
                                  : w.gpu      ? "--dump=gpu-cost"
                                               : NULL,
                     .kv_quiet = !named,
                     .kv_explain = o->kv_explain ? stdout : NULL};
    c.kv.batch = o->batch > 0 ? o->batch : o->calibrate ? o->profile.batch : 0;
    double tstages = now_ms();
    if (ok && g->infer && reached == pass_count - 1)
        ok = stages_run(&c);
    tstages = now_ms() - tstages;
    if (ok && (o->report || o->expect))
        ok = finish_report(o, fwd, fwd_after, g, &c);
    if (ok && o->calibrate)
        ok = calibrate(o, &c);
    double tgen = now_ms();
    if (ok && (o->output || o->source_only) && po.predict)
        fprintf(stderr,
                "ampc: note: model %s has no loss head (its output is not SoftmaxOutput): "
                "the program only predicts (--predict); return SoftmaxOutput(x, label) "
                "to train it\n",
                g->model ? g->model : "");
    if (ok && (o->output || o->source_only))
        ok = train_settings_fit(g) && generate(o, g, d, &c);
    if (ok && o->verbose)
        cli_summary(stderr, o->input, g, trains,
                    o->output        ? o->output
                    : o->source_only ? "the C source"
                                     : NULL);
    tgen = now_ms() - tgen;
    if (o->time_passes) {
        fprintf(stderr, "ampc: pass timings (ms), %d nodes at the end:\n", g->nnodes);
        for (int i = 0; i < pass_count; i++)
            if (times[i] > 0)
                fprintf(stderr, "  %10.3f  %s%s\n", times[i], pass_pipeline[i].name,
                        i == 0 && !o->from_ir ? " (with parsing)" : i == 0 ? " (reading the dump)" : "");
        if (c.planned)
            fprintf(stderr, "  %10.3f  memplan, program, gpu-cost, kvstore\n", tstages);
        if (o->output || o->source_only)
            fprintf(stderr, "  %10.3f  codegen%s\n", tgen, o->source_only ? "" : " and cc");
        fprintf(stderr, "  %10.3f  total\n", now_ms() - t0);
    }
    compilation_free(&c);
    graph_free(fwd);
    graph_free(g);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "diff") == 0) /* ampc diff A B (diff.c) */
        return diff_main(argc - 1, argv + 1, argv[0]);
    Diag d;
    diag_init(&d, stderr);
    /* before getopt_long permutes argv */
    Options o = {.argv0 = argv[0], .cmdline = cli_command_line(argc, argv)};
    int rc = parse_options(argc, argv, &o, &d);
    if (rc == 0)
        rc = run(&o, &d);
    else if (rc < 0)
        rc = 0;
    profile_free(&o.profile);
    diag_free(&d);
    rt_inputs_reset(); /* the file-safety module's list of inputs */
    free((char *)o.cmdline);
    return rc;
}
