/* options.c - the training program's command line: --help (its text shows
 * the defaults in force: the model's train block over the built-in ones),
 * the flags through getopt_long, and rt_train_main, which layers the
 * built-in defaults, the model's train_defaults and the flags, then runs.
 * The parsers of every value live in settings.c (one table for the train
 * block and the flags); this file only drives them from argv, so that
 * what a flag means is said once.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "settings.h"
#include "suggest.h"
#include "train.h"

/* --version: the program's model and how ampc built it (emitted into its
 * RtModel; m is NULL when a test parses flags without one), and the
 * runtime's release and git revision (build_info.c). */
static void print_version(const char *prog, const RtModel *m, FILE *out)
{
    if (m && m->ampc_version)
        fprintf(out, "%s: model %s (sha256 %s), compiled by ampc %s\nbuilt with: %s\n", prog,
                m->name, m->model_hash ? m->model_hash : "unknown", m->ampc_version,
                m->built_with ? m->built_with : "unknown");
    else if (m)
        fprintf(out, "%s: model %s\n", prog, m->name);
    fprintf(out, "runtime: ampc %s%s%s%s\n", rt_release_version(),
            *rt_git_revision() ? " (git " : "", rt_git_revision(), *rt_git_revision() ? ")" : "");
}

/* "unknown option '--batchsize' (did you mean '--batch-size'?)", or an
 * abbreviation that fits several flags, with them */
static void bad_long_option(const char *prog, const char *arg, const struct option *longs,
                            FILE *err)
{
    int n = (int)strcspn(arg + 2, "=");
    char word[48];
    snprintf(word, sizeof word, "%.*s", n < 40 ? n : 40, arg + 2);
    const char *best = NULL;
    int dist = 1 << 30, matches = 0;
    for (const struct option *o = longs; o->name; o++) {
        matches += n > 0 && strncmp(o->name, arg + 2, (size_t)n) == 0;
        if (rt_suggest_closer(word, o->name, &dist))
            best = o->name;
    }
    if (matches > 1) {
        fprintf(err, "%s: option '--%.*s' is ambiguous: it could be", prog, n, arg + 2);
        for (const struct option *o = longs; o->name; o++)
            if (strncmp(o->name, arg + 2, (size_t)n) == 0)
                fprintf(err, " --%s", o->name);
        fputc('\n', err);
    } else if (best) {
        fprintf(err, "%s: unknown option '--%.*s' (did you mean '--%s'?)\n", prog, n, arg + 2,
                best);
    } else {
        fprintf(err, "%s: unknown option '--%.*s'\n", prog, n, arg + 2);
    }
}

static void usage(const RtTrainOptions *o, FILE *out)
{
    const RtLossScaleConfig *ls = &o->loss_scale;
    char lsd[160];
    if (ls->mode == RT_LS_DEFAULT)
        snprintf(lsd, sizeof lsd, "float16: dynamic, else off");
    else if (ls->mode == RT_LS_STATIC)
        snprintf(lsd, sizeof lsd, "%g", (double)ls->init);
    else
        snprintf(lsd, sizeof lsd, "%s", rt_loss_scale_mode_name(ls->mode));
    fprintf(out,
            "Usage: %s [options]\n"
            "Trains the model compiled into this program (docs/training.md).\n"
            "\n"
            "  --epochs N          passes over the training set (%d)\n"
            "  --max-steps N       stop after N steps (batches) in all (no limit)\n"
            "  --batch-size N      samples per step (%lld)\n"
            "  --lr X              learning rate%s (%g), or a schedule: constant(base=),\n"
            "                      cosine(...), step(factor=, steps=), poly(power=, final=)\n"
            "  --optimizer SPEC    sgd(...), nag(...) or adam(beta1=0.9, beta2=0.999,\n"
            "                      epsilon=1e-8, wd=) (%s)\n"
            "  --init SPEC         the weights' initialiser: xavier(...), msra_prelu(...),\n"
            "                      uniform(scale=0.07), normal(sigma=0.01), zero, one\n"
            "  --momentum X        SGD/NAG momentum, 0 for none (%g)\n"
            "  --wd X              weight decay (%g)\n"
            "  --loss-scale S      dynamic, dynamic(init=, growth=, backoff=, interval=, min=,\n"
            "                      max=), off, or a number: a static scale (%s)\n"
            "  --seed N            initialisation, shuffling and synthetic data (%llu)\n"
            "  --data SOURCE       synthetic | digits | fashion_mnist | fashion_mnist(\"DIR\")\n"
            "                      | idx(TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)\n"
            "                      | cifar10 | cifar10(\"DIR\")\n"
            "                      | recordio(TRAIN.rec, VAL.rec, resize=, rand_crop=, ...) (%s)\n"
            "  --data-dir DIR      where digits.csv.gz, fashion-mnist/ and cifar10/ are\n"
            "                      (%s; default $AMPC_DATA_DIR)\n"
            "  --augment LIST      training images: crop=PAD (zero padding, then a random\n"
            "                      crop), mirror (random flips), off (%s)\n"
            "  --random-crop PAD, --random-mirror   the same as separate flags\n"
            "  --json-log FILE     every log event as one JSON object per line\n"
            "  --profile           time per node, node kind and phase, printed at the end\n"
            "  --log-interval N    batches between progress lines, 0 for none (%d)\n"
            "  --save-dir DIR      a checkpoint per epoch: DIR/<model>-<epoch>.ckpt (a run\n"
            "                      stopped mid-epoch: <model>-step<step>.ckpt); a DIR holding\n"
            "                      another run's checkpoints is refused ...\n"
            "  --overwrite         ... unless this is given (or --resume)\n"
            "  --resume CKPT       continue from a checkpoint (with --predict: its weights)\n"
            "  --eval-only         validate the resumed (or initial) parameters and stop\n"
            "  --threads N         OpenBLAS threads (OpenBLAS's default)\n"
            "  --data-threads N    recordio's decoding threads (the cores beyond --threads)\n"
            "  --data-decode-mb N  the memory they share for decoded images, MiB (a quarter\n"
            "                      of physical memory, at most 4096)\n"
            "  --check-numerics    name the first node whose output holds inf or NaN\n"
            "  --load-params FILE  load an MXNet .params file (arg:/aux: names) over the\n"
            "                      initial parameters\n"
            "  --save-params FILE  write the parameters as an MXNet .params file at the end\n"
            "  --save-params-16bit ... each in the dtype the steps read (fp32 masters otherwise)\n"
            "  --predict IN.npy    run the inference step on a float32 .npy, no training, with\n"
            "                      the weights of --resume CKPT or --load-params FILE ...\n"
            "  --output OUT.npy    ... and write the outputs (N, classes) here\n"
            "  --mpi-timeout S     under mpirun (a program built with ampc --mpi): abort\n"
            "                      the job when a rank keeps a collective waiting S s (60)\n"
            "  --mpi-bucket-mb X   MiB of gradients per MPI_Iallreduce, 0: one bucket (4)\n"
            "  --independent-runs  a program without MPI under mpirun or srun: run one\n"
            "                      independent copy per process (each its own --save-dir\n"
            "                      and --json-log) instead of stopping\n"
            "  --cudnn-autotune 0|1  a GPU program (ampc --target=cuda): time cuDNN's candidate\n"
            "                      plans per shape at start-up (1), or take its heuristic's\n"
            "                      first (0), as MXNET_CUDNN_AUTOTUNE_DEFAULT (1)\n"
            "  --cudnn-workspace-mb N  a GPU program: the most workspace one convolution or\n"
            "                      GEMM may use, MiB (%d)\n"
            "  --cudnn-fp32 MODE   a GPU program: fp32 convolutions exact (default: no tensor\n"
            "                      cores, FFT or Winograd), tf32 (tensor cores) or fast (all)\n"
            "  --cudnn-nondeterministic  a GPU program: allow cuDNN engines whose results\n"
            "                      may change from run to run (refused by default)\n"
            "  --cudnn-autotune-max K  a GPU program: time at most K candidate plans per\n"
            "                      convolution (%d)\n"
            "  --cudnn-runtime-compiled  a GPU program: let autotune consider cuDNN engines\n"
            "                      compiled at run time (seconds each; skipped by default)\n"
            "  --cudnn-plan-cache FILE  a GPU program: keep the plans autotune chose in FILE\n"
            "                      and take them from it on the next start, untimed\n"
            "  --cudnn-check       a GPU program, no GPU needed: build every convolution's and\n"
            "                      GEMM's cuDNN and cuBLASLt descriptors, query cuDNN's\n"
            "                      heuristic, print one line per distinct one, and exit\n"
            "  --cuda-graph 0|1    capture the steady train step once as a CUDA graph and\n"
            "                      replay it (1); off under --profile, --check-numerics and\n"
            "                      --inject-nan (0; the CPU device emulates it)\n"
            "  -h, --help          this text\n"
            "  --version           the model, how ampc built this program, the runtime's version\n"
            "Testing: --inject-inf-at-step=K (step K's gradients overflow),\n"
            "  --inject-nan=NODE:STEP (a NaN in NODE's output at STEP),\n"
            "  --dump-state FILE (write the first step's gradients and stop),\n"
            "  --inject-rank=R (the --inject-* flags on rank R only), --inject-stop-at-start\n"
            "  (SIGSTOP before the ranks' start-up check), --save-all-ranks\n"
            "  (ranks > 0 write checkpoints into SAVE_DIR/rankR too), --sim-ranks=K (one\n"
            "  process computes K ranks' batches in turn and sums their gradients)\n",
            o->prog, o->epochs, (long long)o->batch_size,
            o->sched.kind != RT_LR_CONSTANT ? " (the schedule's base)" : "", (double)o->lr,
            o->optimizer == RT_OPT_ADAM  ? "adam"
            : o->optimizer == RT_OPT_NAG ? "nag"
                                         : "sgd",
            (double)o->momentum, (double)o->wd, lsd, (unsigned long long)o->seed, o->data,
            o->data_dir,
            o->augment_pad && o->augment_mirror ? "crop and mirror"
            : o->augment_pad                    ? "crop"
            : o->augment_mirror                 ? "mirror"
                                                : "off",
            o->log_interval, RT_CUDNN_WORKSPACE_MB_DEFAULT, RT_CUDNN_AUTOTUNE_MAX_DEFAULT);
}

/* The long options of every flag in the table (getopt_long's val: 256 + its
 * index), then --help. */
static const struct option *long_options(void)
{
    static struct option longopts[64];
    if (longopts[0].name)
        return longopts;
    int n = 0;
    for (int i = 0; i < rt_nsettings && n < 61; i++)
        if (rt_settings[i].flag)
            longopts[n++] = (struct option){rt_settings[i].flag,
                                            rt_settings[i].has_arg ? required_argument
                                                                   : no_argument,
                                            NULL, 256 + i};
    longopts[n++] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[n] = (struct option){"version", no_argument, NULL, 'V'};
    return longopts;
}

static int parse_args(RtTrainOptions *o, const RtModel *m, int argc, char **argv, FILE *out,
                      FILE *err)
{
    const struct option *longopts = long_options();
    if (argc > 0 && argv[0]) {
        const char *slash = strrchr(argv[0], '/');
        o->prog = slash ? slash + 1 : argv[0];
    }
    opterr = 0;
    optind = 0; /* GNU: rescan from the start (several parses in one process) */
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == 'h') {
            usage(o, out);
            return 0;
        }
        if (c == 'V') {
            print_version(o->prog, m, out);
            return 0;
        }
        if (c == ':') {
            fprintf(err, "%s: option '%s' needs a value\nTry '%s --help'.\n", o->prog,
                    argv[optind - 1], o->prog);
            return 2;
        }
        if (c < 256 || c >= 256 + rt_nsettings) {
            if (optopt && strncmp(argv[optind - 1], "--", 2) == 0)
                fprintf(err, "%s: option '%.*s' takes no value\n", o->prog,
                        (int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
            else if (optopt)
                fprintf(err, "%s: unknown option '-%c'\n", o->prog, optopt);
            else if (strncmp(argv[optind - 1], "--", 2) == 0)
                bad_long_option(o->prog, argv[optind - 1], longopts, err);
            else
                fprintf(err, "%s: unknown option '%s'\n", o->prog, argv[optind - 1]);
            fprintf(err, "Try '%s --help'.\n", o->prog);
            return 2;
        }
        const RtSetting *s = &rt_settings[c - 256];
        char msg[512];
        if (!rt_setting_apply(o, s, optarg, RT_FROM_FLAG, msg, sizeof msg)) {
            fprintf(err, "%s: --%s: %s\nTry '%s --help'.\n", o->prog, s->flag, msg, o->prog);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(err, "%s: unexpected argument '%s'\nTry '%s --help'.\n", o->prog, argv[optind],
                o->prog);
        return 2;
    }
    return -1;
}

int rt_train_parse_args(RtTrainOptions *o, int argc, char **argv, FILE *out, FILE *err)
{
    return parse_args(o, NULL, argc, argv, out, err);
}

int rt_train_main(int argc, char **argv, const RtModel *m)
{
    RtTrainOptions o;
    char err[1024];
    rt_train_options_default(&o);
    if (argc > 0 && argv[0]) {
        const char *slash = strrchr(argv[0], '/');
        o.prog = slash ? slash + 1 : argv[0];
    }
    if (!rt_train_apply_defaults(&o, m->train_defaults, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", o.prog, err);
        return 2;
    }
    int rc = parse_args(&o, m, argc, argv, stdout, stderr);
    if (rc >= 0)
        return rc;
    return rt_train_run(m, &o, stdout, stderr, NULL);
}
