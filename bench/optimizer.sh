#!/bin/sh
# optimizer.sh - achieved memory bandwidth of the fused multi-precision
# SGD-momentum, NAG and Adam updates (runtime/kernels/optim.h) over
# ResNet-50 v1d's 25.6 M parameters, against a copy measured in the same run,
# with 1 and 2 threads, built at the runtime's flags (-std=c11 -O2) and at
# -O3 (and with clang -O2 when clang is installed; O2nme, O3nme: with
# -fno-math-errno, which Adam's sqrtf needs to vectorise).  Prints; asserts
# nothing.  About 1.5 minutes a build on 2 cores.
#
#   bench/optimizer.sh [optim_bench args...]     e.g. --reps 9 --only adam
#   CC=gcc BUILDS="O2 O3 O2dyn clang" bench/optimizer.sh
#
# bench/optim_bench.c says what is counted.  Goal: >= 80% of the copy.
#
# Then the runtime's own rt_optim_step2 (runtime/cpu/optim.c, linked from
# build/libampcrt.a at the runtime's flags) over a ResNet-50 v1d table of
# 167 fp16 parameters with fp32 masters, once with the AVX2+F16C path
# (runtime/cpu/optim_simd.c, where the CPU has it) and once with AMPC_NO_SIMD=1
# (the per-element loops); skip with RT_BENCH=0.  RT_REPS sets its repeats.
set -e
cd "$(dirname "$0")/.."
out=${BENCH_BUILD:-build/bench}
mkdir -p "$out"
CC=${CC:-cc}
base="-std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iruntime -g"
builds=${BUILDS:-"O2 O3 clang"}
for b in $builds; do
    case $b in
        O2) cc=$CC; flags="-O2" ;;
        O3) cc=$CC; flags="-O3" ;;
        O2nme) cc=$CC; flags="-O2 -fno-math-errno" ;;
        O3nme) cc=$CC; flags="-O3 -fno-math-errno" ;;
        O2dyn) cc=$CC; flags="-O2 -fvect-cost-model=dynamic" ;;
        clang) command -v clang >/dev/null 2>&1 || { echo "== clang not installed: skipped"; continue; }
               cc=clang; flags="-O2" ;;
        *) echo "optimizer.sh: unknown build $b (O2, O3, O2nme, O3nme, O2dyn, clang)" >&2; exit 2 ;;
    esac
    bin="$out/optim_bench_$b"
    $cc $base $flags -DCOMPILER_FLAGS="\"$($cc --version | head -1 | sed 's/ (.*)//') $flags\"" \
        -o "$bin" bench/optim_bench.c -pthread -lm
    echo "== $b: $cc $flags"
    "$bin" "$@"
done

[ "${RT_BENCH:-1}" = 0 ] && exit 0
make -s build/libampcrt.a
cat > "$out/optim_rt_bench.c" <<'EOF_C'
/* optim_rt_bench (written by bench/optimizer.sh): the runtime's own
 * rt_optim_step2 over a ResNet-50 v1d table (167 fp16 tensors with fp32
 * masters, fp16 gradients, 25,576,264 values), against the same copy loop
 * as optim_bench.c and glibc's memcpy in the same rounds.  Bytes: rt_optim_bytes_per_param
 * (fused finite check).  AMPC_NO_SIMD=1 times the per-element loops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/half.h"
#include "train.h"

bool rt_optim_simd_active(void);

#define MAXP 200
static RtParam P[MAXP];
static RtBuffer B[2 * MAXP + 3];
static char names[MAXP][16];
static int np;

static void add(int64_t n, float wd_mult)
{
    snprintf(names[np], sizeof names[np], "p%d", np);
    P[np] = (RtParam){names[np], RT_PK_WEIGHT, RT_F16, true, 1, {n}, n, "default",
                      wd_mult, 1, np, 0, RT_LAYOUT_NCHW};
    np++;
}
static void conv(int o, int i, int k) { add((int64_t)o * i * k * k, 1); }
static void bn(int c) { add(c, 0), add(c, 0); }

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void copy_loop(float *restrict dst, const float *restrict src, int64_t n)
{
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        memcpy(dst + i, src + i, 64);
        __asm__ volatile("" : : "r"(dst + i) : "memory");
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1 || reps > 100)
        return 2;
    conv(32, 3, 3), bn(32), conv(32, 32, 3), bn(32), conv(64, 32, 3), bn(64);
    int in = 64;
    static const int blocks[4] = {3, 4, 6, 3};
    for (int s = 0; s < 4; s++)
        for (int b = 0, w = 64 << s; b < blocks[s]; b++) {
            conv(w, in, 1), bn(w), conv(w, w, 3), bn(w), conv(4 * w, w, 1), bn(4 * w);
            if (b == 0)
                conv(4 * w, in, 1), bn(4 * w);
            in = 4 * w;
        }
    add(1000 * 2048, 1), add(1000, 0);
    int64_t total = 0;
    for (int i = 0; i < np; i++) {
        P[i].grad = np + i;
        B[i] = (RtBuffer){names[i], RT_F16, P[i].numel, 0};
        B[np + i] = (RtBuffer){names[i], RT_F16, P[i].numel, 0};
        total += P[i].numel;
    }
    B[2 * np] = (RtBuffer){"data", RT_F32, 0, 4};
    B[2 * np + 1] = (RtBuffer){"label", RT_F32, 0, 1};
    B[2 * np + 2] = (RtBuffer){"prob", RT_F32, 0, 3};
    RtModel m = {.name = "resnet50_v1d_table", .nparams = np, .params = P, .nbuffers = 2 * np + 3,
                 .buffers = B, .data = 2 * np, .label = 2 * np + 1, .prob_train = 2 * np + 2,
                 .prob_infer = 2 * np + 2, .data_rank = 1, .data_shape = {4}, .classes = 3};
    int64_t cn = (int64_t)64 << 20;
    float *src = aligned_alloc(64, (size_t)cn * 4), *dst = aligned_alloc(64, (size_t)cn * 4);
    for (int64_t i = 0; i < cn; i++)
        src[i] = (float)i, dst[i] = 0;
    printf("rt_optim_step2: %lld parameters in %d tensors, 1 thread, AVX2+F16C path %s; "
           "best and median of %d\n", (long long)total, np,
           rt_optim_simd_active() ? "on" : "off", reps);
    static const char *const nm[3] = {"sgd_mom", "nag", "adam"};
    double *t = malloc(sizeof *t * 3 * (size_t)reps);
    for (int o = 0; o < 3; o++) {
        RtTrainer tr;
        char err[256];
        RtOptConfig c = {.kind = o == 0 ? RT_OPT_SGD : o == 1 ? RT_OPT_NAG : RT_OPT_ADAM,
                         .lr = 0.1f, .momentum = o < 2 ? 0.9f : 0, .wd = 1e-4f,
                         .rescale_grad = 1.0f / 256, .clip_gradient = -1, .beta1 = 0.9f,
                         .beta2 = 0.999f, .epsilon = 1e-8f, .t = 10};
        if (!rt_trainer_init(&tr, &m, 1, o == 2 ? 2 : 1, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        uint64_t r = 1;
        double bytes = 0;
        for (int i = 0; i < np; i++) {
            ampc_half *g = tr.ctx.buf[P[i].grad];
            for (int64_t e = 0; e < P[i].numel; e++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                g[e] = (ampc_half)(((r >> 33) & 0x83ffu) | ((1 + (r >> 50) % 20) << 10));
                tr.ctx.master[i][e] = (float)((double)((r >> 20) & 0xffff) / 65536.0 - 0.5) * 0.1f;
            }
            bytes += (double)rt_optim_bytes_per_param(&P[i], RT_F16, &c, false) * (double)P[i].numel;
        }
        for (int k = -1; k < reps; k++) {
            double t0 = now();
            bool ok = rt_optim_step2(&m, &tr.ctx, tr.state, tr.state2, &c);
            double t1 = now();
            copy_loop(dst, src, cn);
            double t2 = now();
            memcpy(src, dst, (size_t)cn * 4); /* glibc: non-temporal stores */
            double t3 = now();
            if (!ok)
                printf("  (non-finite gradient seen)\n");
            if (k >= 0)
                t[k] = t1 - t0, t[reps + k] = t2 - t1, t[2 * reps + k] = t3 - t2;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp);
        qsort(t + reps, (size_t)reps, sizeof *t, cmp);
        qsort(t + 2 * reps, (size_t)reps, sizeof *t, cmp);
        double mcpy = 8.0 * (double)cn / t[2 * reps] / 1e9;
        double copy = 8.0 * (double)cn / t[reps] / 1e9, gbs = bytes / t[0] / 1e9;
        printf("  %-7s %2.0f B/param: %7.2f ms %6.2f GB/s best, %6.2f median; copy loop %.2f, memcpy"
               " %.2f GB/s; %4.0f%% of copy loop, %4.0f%% of memcpy\n", nm[o],
               bytes / (double)total, 1e3 * t[0], gbs, bytes / t[reps / 2] / 1e9, copy, mcpy,
               100.0 * gbs / copy, 100.0 * gbs / mcpy);
        rt_trainer_free(&tr);
    }
    free(t), free(src), free(dst);
    return 0;
}
EOF_C
$CC $base -O2 -o "$out/optim_rt_bench" "$out/optim_rt_bench.c" build/libampcrt.a \
    -lopenblas -lz -lm -pthread
echo "== the runtime's rt_optim_step2 ($CC -O2)"
"$out/optim_rt_bench" "${RT_REPS:-7}"
AMPC_NO_SIMD=1 "$out/optim_rt_bench" "${RT_REPS:-7}"
