#!/usr/bin/env bash
# cpu_step.sh - training step time of a compiled model on the CPU runtime
# against the same network in PyTorch, in the same run.
#
#   bench/cpu_step.sh AMPC
#
# Compiles examples/resnet20_cifar.sym (BENCH_MODEL) with AMPC for fp32
# (--amp=off), and, for information, --amp=float16 and --amp=bfloat16
# (BENCH_AMP; empty for none).  Each program trains on synthetic data at
# batch BENCH_BATCH (32) for BENCH_STEPS (30) steps with --log-interval 5,
# once per thread count in BENCH_THREADS ("1 2").  The PyTorch peer
# (bench/pytorch_resnet20.py: the same architecture and parameter count,
# SGD with Nesterov momentum and weight decay like ampc's default optimizer)
# runs right after each ampc run with the same batch, steps and threads, and
# the whole is repeated BENCH_REPS (3) times, so that both see the same
# machine.  PYTHON (/usr/bin/python3) runs it; without torch its columns
# say n/a.  The second peer, MXNet 1.9.1 (bench/mxnet_resnet20.py: the same
# network in Gluon, hybridized, MXNet's own nag optimizer with momentum 0.9
# and wd 1e-4, oneDNN kernels), runs right after PyTorch with the same
# batch, steps and threads; MXNET_PYTHON (/work/venv-mxnet/bin/python) runs
# it, and without mxnet its columns say n/a.
#
# Installing the peers (not part of make check, so not in tools/deps.txt):
#   apt-get install -y python3-torch              # PyTorch 1.13, /usr/bin/python3
#   python3 -m venv /work/venv-mxnet
#   /work/venv-mxnet/bin/pip install mxnet==1.9.1 'numpy<1.24'
#
# Two figures per side, medians over all rounds:
#   ms/step      wall time: ampc's Speed lines (each the mean of 5 steps; the
#                first, which pays first-touch page faults, is dropped) as
#                1000*batch/speed; PyTorch's per-step perf_counter;
#   CPU ms/step  CPU time of the process, all its threads: ampc's task-clock
#                (perf stat) of the run minus that of a 5-step run, over the
#                step difference (start-up and validation cancel); PyTorch's
#                per-step process_time (MXNet's likewise).  On a shared
#                machine other jobs
#                steal wall time but barely CPU time, so at 1 thread this is
#                the steadier comparison; at 2 threads it adds both threads
#                (wall time is the speed, CPU time the cost).
# Ratios are ampc/PyTorch and ampc/MXNet: below 1, ampc is faster.
#
# Nothing here is asserted: timings on a shared machine are information.
# The machine's load average is printed before and after.
set -u
[ $# -eq 1 ] || { echo "usage: $0 AMPC" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[ -x "$ampc" ] || { echo "cpu_step.sh: $1 is not an executable" >&2; exit 2; }
model=${BENCH_MODEL:-$root/examples/resnet20_cifar.sym}
batch=${BENCH_BATCH:-32}
steps=${BENCH_STEPS:-30}
threads=${BENCH_THREADS:-"1 2"}
reps=${BENCH_REPS:-3}
amps=${BENCH_AMP-"float16 bfloat16"}
python=${PYTHON:-/usr/bin/python3}
mxpython=${MXNET_PYTHON:-/work/venv-mxnet/bin/python}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ampc-step.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

median() {
    printf '%s\n' "$@" | grep -v '^$' | sort -g |
        awk '{a[NR]=$1} END {if (!NR) print "n/a"; else printf "%.1f\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'
}

have_perf=
if command -v perf >/dev/null && perf stat -x, -e task-clock -o "$tmp/perf" true 2>/dev/null; then
    have_perf=1
fi

# task-clock of a command in ms (nothing without perf); its output to $tmp/out
cpu_ms() {
    if [ -n "$have_perf" ]; then
        perf stat -x, -e task-clock -o "$tmp/perf" "$@" >"$tmp/out" 2>&1
        awk -F, '$3 == "task-clock" {printf "%.3f", $1}' "$tmp/perf"
    else
        "$@" >"$tmp/out" 2>&1
    fi
}

# ampc_run PROG THREADS: appends the run's ms per step (Speed lines but the
# first) to the list named by $3, and its CPU ms per step to the one named by $4
ampc_run() {
    local args=(--data synthetic --batch-size "$batch" --log-interval 5 --threads "$2")
    local c0 c1
    c1=$(cpu_ms "$1" "${args[@]}" --max-steps "$steps")
    eval "$3+=\" $(sed -n 's/.*Speed: \([0-9.]*\) samples\/sec.*/\1/p' "$tmp/out" |
        awk -v b="$batch" 'NR > 1 && $1 > 0 {printf "%.3f ", 1000 * b / $1}')\""
    if [ -n "$c1" ] && [ "$steps" -gt 5 ]; then
        c0=$(cpu_ms "$1" "${args[@]}" --max-steps 5)
        eval "$4+=\" $(awk -v a="$c0" -v b="$c1" -v n=$((steps - 5)) 'BEGIN {printf "%.3f", (b - a) / n}')\""
    fi
}

# torch_run THREADS: appends the peer's wall and CPU ms per step to $2 and $3
torch_run() {
    local line
    line=$("$python" "$root/bench/pytorch_resnet20.py" "$batch" "$1" "$steps" 2>/dev/null)
    eval "$2+=\" $(sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' <<<"$line")\""
    eval "$3+=\" $(sed -n 's/.*cpu_ms=\([0-9.]*\).*/\1/p' <<<"$line")\""
}

# mx_run THREADS: appends the MXNet peer's wall and CPU ms per step to $2 and $3
mx_run() {
    [ -n "$have_mxnet" ] || return 0
    local line
    line=$("$mxpython" "$root/bench/mxnet_resnet20.py" "$batch" "$1" "$steps" 2>/dev/null)
    eval "$2+=\" $(sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' <<<"$line")\""
    eval "$3+=\" $(sed -n 's/.*cpu_ms=\([0-9.]*\).*/\1/p' <<<"$line")\""
}

have_mxnet=
if [ -x "$mxpython" ] && "$mxpython" -c 'import mxnet' 2>/dev/null; then
    have_mxnet=1
else
    echo "cpu_step.sh: no MXNet at MXNET_PYTHON=$mxpython: MXNet columns n/a" >&2
fi

best() {
    printf '%s\n' "$@" | grep -v '^$' | sort -g | awk 'NR == 1 {printf "%.1f\n", $1} END {if (!NR) print "n/a"}'
}

ratio() {
    if [ "$1" != n/a ] && [ "$2" != n/a ]; then
        awk -v a="$1" -v p="$2" 'BEGIN {printf "%.2f", a / p}'
    else
        echo n/a
    fi
}

echo "machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $(basename "$model"), batch $batch, $steps steps a run, $reps rounds"
echo "peers: $("$python" -c 'import torch; print("PyTorch", torch.__version__)' 2>/dev/null || echo "no PyTorch"), $([ -n "$have_mxnet" ] && "$mxpython" -c 'import mxnet; print("MXNet", mxnet.__version__)' 2>/dev/null || echo "no MXNet")"

"$ampc" "$model" --amp=off -o "$tmp/fp32" || { echo "cpu_step.sh: ampc failed" >&2; exit 1; }
for a in $amps; do
    "$ampc" "$model" --amp="$a" -o "$tmp/$a" || { echo "cpu_step.sh: ampc --amp=$a failed" >&2; exit 1; }
done

for t in $threads; do
    declare "AW_fp32_$t=" "AC_fp32_$t=" "TW_$t=" "TC_$t=" "MW_$t=" "MC_$t="
done
for ((r = 0; r < reps; r++)); do
    for t in $threads; do
        ampc_run "$tmp/fp32" "$t" "AW_fp32_$t" "AC_fp32_$t"
        torch_run "$t" "TW_$t" "TC_$t"
        mx_run "$t" "MW_$t" "MC_$t"
    done
done
for a in $amps; do
    for t in $threads; do
        declare "AW_${a}_$t=" "AC_${a}_$t="
        ampc_run "$tmp/$a" "$t" "AW_${a}_$t" "AC_${a}_$t"
    done
done

echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
echo
fmt='%-9s %-7s | %8s %8s %9s %8s %6s | %8s %8s %6s\n'
printf "$fmt" "" "" "ampc" "" "PyTorch" "" "" "ampc" "PyTorch" ""
printf "$fmt" dtype threads "ms/step" "(best)" "ms/step" "(best)" ratio "CPU ms" "CPU ms" ratio
for t in $threads; do
    aw_v="AW_fp32_$t" ac_v="AC_fp32_$t" tw_v="TW_$t" tc_v="TC_$t"
    aw=$(median ${!aw_v}) ac=$(median ${!ac_v}) tw=$(median ${!tw_v}) tc=$(median ${!tc_v})
    printf "$fmt" fp32 "$t" "$aw" "$(best ${!aw_v})" "$tw" "$(best ${!tw_v})" "$(ratio "$aw" "$tw")" \
        "$ac" "$tc" "$(ratio "$ac" "$tc")"
done
for a in $amps; do
    for t in $threads; do
        aw_v="AW_${a}_$t" ac_v="AC_${a}_$t"
        printf "$fmt" "$a" "$t" "$(median ${!aw_v})" "$(best ${!aw_v})" - - - "$(median ${!ac_v})" - -
    done
done
echo
mfmt='%-9s %-7s | %8s %8s | %9s %8s %6s | %8s %8s %6s\n'
printf "$mfmt" "" "" "ampc" "" "MXNet" "" "" "ampc" "MXNet" ""
printf "$mfmt" dtype threads "ms/step" "(best)" "ms/step" "(best)" ratio "CPU ms" "CPU ms" ratio
for t in $threads; do
    aw_v="AW_fp32_$t" ac_v="AC_fp32_$t" mw_v="MW_$t" mc_v="MC_$t"
    aw=$(median ${!aw_v}) ac=$(median ${!ac_v}) mw=$(median ${!mw_v}) mc=$(median ${!mc_v})
    printf "$mfmt" fp32 "$t" "$aw" "$(best ${!aw_v})" "$mw" "$(best ${!mw_v})" "$(ratio "$aw" "$mw")" \
        "$ac" "$mc" "$(ratio "$ac" "$mc")"
done
echo "(ms/step: median wall time a step, best: the fastest 5-step interval or run;"
echo " CPU ms: CPU time a step, all threads; ratio: ampc/PyTorch or ampc/MXNet, below 1 ="
echo " ampc faster)"
