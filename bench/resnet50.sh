#!/usr/bin/env bash
# resnet50.sh - ResNet-50 v1d training on the CPU runtime against the same
# network in PyTorch, interleaved in the same run: step time and peak RSS.
#
#   bench/resnet50.sh AMPC
#   BENCH_BATCH="8 32" BENCH_REPS=10 bench/resnet50.sh build/ampc
#
# Compiles examples/resnet50_v1d.sym (BENCH_MODEL) with AMPC for fp32
# (--amp=off) and for each of BENCH_AMP ("float16"; add bfloat16 if wanted,
# empty for none).  For each batch size in BENCH_BATCH ("32"; a list runs
# each in turn), BENCH_REPS (3) rounds, each round for each thread count in
# BENCH_THREADS ("1 2"): the fp32 program, right after it the PyTorch peer
# (bench/pytorch_resnet50.py: the same v1d network and parameter count, SGD
# with Nesterov momentum and weight decay like ampc's default optimizer,
# same batch, 224x224 input), then each AMP program.  So one round is one
# interleaved ampc/PyTorch pair per thread count; BENCH_REPS=10 gives the 10
# pairs the issue-10 targets ask for (the default is 3, since one round at
# batch 32 takes minutes).
#
# Each run takes BENCH_WARMUP (2) untimed steps, then BENCH_STEPS (3) timed
# ones.  ampc: --data synthetic --log-interval 1 --json-log; its Speedometer
# starts the clock after the first step, so the first samples_per_sec event
# (step 1) is the second warm-up step and the next BENCH_STEPS events are the
# timed steps.  When enough events are written, the script reads the
# program's VmHWM (peak RSS) from /proc and ends it (SIGTERM), so neither the
# rest of the epoch nor the validation pass runs: both sides' peak RSS is
# that of training steps only.  PyTorch: per-step perf_counter and
# getrusage's ru_maxrss, printed by the script itself; its figure includes
# the interpreter and the torch libraries (about 230 MiB, printed as
# "base").  CPU time a step (all threads; the steadier figure when other
# jobs load the machine): ampc's from /proc/PID/stat (utime + stime) read
# when the first timed step starts and after the last (polled every 50 ms,
# so with BENCH_WARMUP >= 2 only), PyTorch's per-step process_time.
#
# Requirements: the peer needs PyTorch (Debian's python3-torch, PyTorch 1.13:
# `apt-get install -y python3-torch`, run with PYTHON=/usr/bin/python3, the
# default); without torch its columns say n/a.  Memory: every run gets a
# virtual-memory limit (ulimit -v) of BENCH_MEM_LIMIT_MIB (default: the
# MemAvailable at start minus 1.5 GiB; 0 for none), so a batch too large for
# the machine fails in malloc (shown as "failed") instead of waking the OOM
# killer on a shared machine.
#
# Printed per side, per dtype, thread count and batch: the median ms/step
# over all timed steps of all rounds, the peak RSS (MiB, median over the
# rounds) and MiB per sample (peak RSS / batch), the median CPU ms a step;
# ratios are ampc/PyTorch (below 1, ampc is faster or smaller): time as the
# median over the rounds of (ampc run's median)/(PyTorch run's median), CPU
# and RSS of the medians.  The
# AMP rows are compared with PyTorch fp32.  Last, the gain from the second
# thread (ms at 1 thread / ms at 2) for each side.  Nothing is asserted
# except that both sides train the same number of parameters (exit 1 if not):
# timings on a shared machine are information.  The load average is printed
# before and after.
set -u
[ $# -eq 1 ] || { echo "usage: $0 AMPC" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[ -x "$ampc" ] || { echo "resnet50.sh: $1 is not an executable" >&2; exit 2; }
model=${BENCH_MODEL:-$root/examples/resnet50_v1d.sym}
batches=${BENCH_BATCH:-32}
steps=${BENCH_STEPS:-3}
warmup=${BENCH_WARMUP:-2}
threads=${BENCH_THREADS:-"1 2"}
reps=${BENCH_REPS:-3}
amps=${BENCH_AMP-float16}
python=${PYTHON:-/usr/bin/python3}
[ "$warmup" -ge 1 ] && [ "$steps" -ge 1 ] || { echo "resnet50.sh: BENCH_WARMUP and BENCH_STEPS must be >= 1" >&2; exit 2; }
if [ -z "${BENCH_MEM_LIMIT_MIB+x}" ]; then
    memlimit=$(awk '/^MemAvailable:/ {printf "%d", $2 / 1024 - 1536}' /proc/meminfo)
else
    memlimit=$BENCH_MEM_LIMIT_MIB
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ampc-r50.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

median() {
    printf '%s\n' "$@" | grep -v '^$' | sort -g |
        awk '{a[NR]=$1} END {if (!NR) print "n/a"; else printf "%.1f\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'
}
median3() { # the same with 3 decimals (ratios)
    printf '%s\n' "$@" | grep -v '^$' | sort -g |
        awk '{a[NR]=$1} END {if (!NR) print "n/a"; else printf "%.3f\n", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'
}
ratio() {
    if [ "$1" != n/a ] && [ "$2" != n/a ]; then
        awk -v a="$1" -v p="$2" 'BEGIN {printf "%.2f", a / p}'
    else
        echo n/a
    fi
}
per_sample() {
    if [ "$1" != n/a ]; then awk -v r="$1" -v b="$2" 'BEGIN {printf "%.1f", r / b}'; else echo n/a; fi
}
# limited CMD...: exec CMD under the memory limit.  Call it only in a
# subshell (`limited ... &`, `$(limited ...)`): the limit stays there, and
# the exec makes $! the program itself, whose /proc status the caller reads.
limited() {
    if [ "$memlimit" -gt 0 ] 2>/dev/null; then
        ulimit -v $((memlimit * 1024)) || exit 1
    fi
    exec "$@"
}

# CPU time (user + system, all threads) of process $1 in clock ticks
cpu_ticks() {
    sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}'
}

# ampc_run PROG BATCH THREADS KEY: appends the timed steps' ms to A_KEY, the
# run's median to AM_KEY (for the pair ratios; "x" when it failed), its peak
# RSS in MiB to AR_KEY and its CPU ms a timed step to AC_KEY
ampc_run() {
    local need=$((warmup - 1 + steps)) json="$tmp/log.json" out="$tmp/out" pid n hwm= c0= c1=
    rm -f "$json"
    limited "$1" --data synthetic --batch-size "$2" --threads "$3" --log-interval 1 \
        --json-log "$json" >"$out" 2>&1 &
    pid=$!
    while :; do
        n=$(grep -c '"samples_per_sec"' "$json" 2>/dev/null)
        # the timed steps start at event warmup-1 (seen within a poll)
        [ -z "$c0" ] && [ "$warmup" -ge 2 ] && [ "${n:-0}" -ge $((warmup - 1)) ] && c0=$(cpu_ticks "$pid")
        if [ "${n:-0}" -ge "$need" ]; then
            hwm=$(awk '/^VmHWM:/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status" 2>/dev/null)
            c1=$(cpu_ticks "$pid")
            kill -TERM "$pid" 2>/dev/null
            break
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    wait "$pid" 2>/dev/null
    local ms
    ms=$(sed -n 's/.*"samples_per_sec":\([0-9.eE+-]*\).*/\1/p' "$json" 2>/dev/null |
        awk -v b="$2" -v w="$warmup" -v s="$steps" 'NR >= w && NR < w + s && $1 > 0 {printf "%.3f ", 1000 * b / $1}')
    if [ -z "$hwm" ] || [ -z "$ms" ]; then
        echo "  ampc $(basename "$1") batch $2, $3 threads: failed; its last lines:" >&2
        tail -n 3 "$out" | sed 's/^/    /' >&2
        eval "AM_$4+=\" x\""
        return
    fi
    eval "A_$4+=\" $ms\""
    eval "AM_$4+=\" $(median $ms)\""
    eval "AR_$4+=\" $hwm\""
    [ -n "$c0" ] && [ -n "$c1" ] &&
        eval "AC_$4+=\" $(awk -v a="$c0" -v b="$c1" -v t="$clk" -v s="$steps" 'BEGIN {printf "%.1f", (b - a) * 1000 / t / s}')\""
    [ -n "$params_ampc" ] || params_ampc=$(sed -n 's/^Model [^:]*: \([0-9]*\) trainable values.*/\1/p' "$out")
}

# torch_run BATCH THREADS KEY: appends the peer's median ms to T_KEY (and
# TM_KEY, "x" when it failed), its peak RSS to TR_KEY and CPU ms to TC_KEY
torch_run() {
    local line
    [ -n "$have_torch" ] || { eval "TM_$3+=\" x\""; return; }
    line=$(limited "$python" "$root/bench/pytorch_resnet50.py" "$1" "$2" "$steps" "$warmup" 2>"$tmp/err")
    local ms rss cpu
    ms=$(sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' <<<"$line")
    cpu=$(sed -n 's/.*cpu_ms=\([0-9.]*\).*/\1/p' <<<"$line")
    rss=$(sed -n 's/.* rss_mib=\([0-9.]*\).*/\1/p' <<<"$line")
    if [ -z "$ms" ]; then
        echo "  PyTorch batch $1, $2 threads: failed; its last lines:" >&2
        tail -n 3 "$tmp/err" | sed 's/^/    /' >&2
        eval "TM_$3+=\" x\""
        return
    fi
    eval "T_$3+=\" $ms\" TM_$3+=\" $ms\" TR_$3+=\" $rss\" TC_$3+=\" $cpu\""
    [ -n "$params_torch" ] || params_torch=$(sed -n 's/.*params=\([0-9]*\).*/\1/p' <<<"$line")
    [ -n "$base_torch" ] || base_torch=$(sed -n 's/.*base_rss_mib=\([0-9.]*\).*/\1/p' <<<"$line")
}

# pair_ratio AMS TMS: the median over rounds of ampc/PyTorch (both ran)
pair_ratio() {
    local -a a=($1) p=($2)
    local i r=
    for i in "${!a[@]}"; do
        [ "${a[$i]}" != x ] && [ "${p[$i]:-x}" != x ] && r+=" $(awk -v x="${a[$i]}" -v y="${p[$i]}" 'BEGIN {printf "%.4f", x / y}')"
    done
    local m
    m=$(median3 $r)
    [ "$m" = n/a ] && echo n/a || awk -v m="$m" 'BEGIN {printf "%.2f", m}'
}

have_torch=
if "$python" -c 'import torch' 2>/dev/null; then
    have_torch=1
else
    echo "resnet50.sh: $python has no torch (apt-get install -y python3-torch): PyTorch columns n/a" >&2
fi
params_ampc= params_torch= base_torch=
clk=$(getconf CLK_TCK)

echo "machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/^MemTotal:/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $(basename "$model"), batch $batches, threads $threads, $reps rounds, $warmup warm-up + $steps timed steps a run"
echo "ampc: $ampc; peer: $("$python" -c 'import torch; print("PyTorch", torch.__version__)' 2>/dev/null || echo none)"
[ "$memlimit" -gt 0 ] 2>/dev/null && echo "memory limit a run: $memlimit MiB (ulimit -v)"

"$ampc" "$model" --amp=off -o "$tmp/fp32" || { echo "resnet50.sh: ampc failed" >&2; exit 1; }
for a in $amps; do
    "$ampc" "$model" --amp="$a" -o "$tmp/$a" || { echo "resnet50.sh: ampc --amp=$a failed" >&2; exit 1; }
done

for b in $batches; do
    for ((r = 0; r < reps; r++)); do
        for t in $threads; do
            ampc_run "$tmp/fp32" "$b" "$t" "fp32_${b}_$t"
            torch_run "$b" "$t" "${b}_$t"
            for a in $amps; do
                ampc_run "$tmp/$a" "$b" "$t" "${a}_${b}_$t"
            done
        done
        echo "  batch $b: round $((r + 1)) of $reps done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    done
done

echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
echo "trainable parameters: ampc ${params_ampc:-n/a}, PyTorch ${params_torch:-n/a}"
if [ -n "$params_ampc" ] && [ -n "$params_torch" ] && [ "$params_ampc" != "$params_torch" ]; then
    echo "resnet50.sh: the networks differ: $params_ampc against $params_torch parameters" >&2
    exit 1
fi
echo
fmt='%-8s %5s %3s | %8s %8s %8s %7s | %8s %8s %8s %7s | %5s %5s %5s\n'
printf "$fmt" "" "" "" "ampc" "" "" "" "PyTorch" "" "" "" "ratio" "" ""
printf "$fmt" dtype batch thr "ms/step" "CPU ms" "RSS MiB" "MiB/smp" "ms/step" "CPU ms" "RSS MiB" "MiB/smp" time CPU RSS
for b in $batches; do
    for d in fp32 $amps; do
        for t in $threads; do
            a_v="A_${d}_${b}_$t" am_v="AM_${d}_${b}_$t" ar_v="AR_${d}_${b}_$t" ac_v="AC_${d}_${b}_$t"
            t_v="T_${b}_$t" tm_v="TM_${b}_$t" tr_v="TR_${b}_$t" tc_v="TC_${b}_$t"
            am=$(median ${!a_v-}) ar=$(median ${!ar_v-}) ac=$(median ${!ac_v-})
            tm=$(median ${!t_v-}) tr=$(median ${!tr_v-}) tc=$(median ${!tc_v-})
            printf "$fmt" "$d" "$b" "$t" "$am" "$ac" "$ar" "$(per_sample "$ar" "$b")" "$tm" "$tc" "$tr" \
                "$(per_sample "$tr" "$b")" "$(pair_ratio "${!am_v-}" "${!tm_v-}")" "$(ratio "$ac" "$tc")" \
                "$(ratio "$ar" "$tr")"
        done
    done
done
set -- $threads
if [ $# -ge 2 ]; then
    echo
    echo "gain from $2 threads over $1 (ms at $1 / ms at $2):"
    for b in $batches; do
        for d in fp32 $amps; do
            x1="A_${d}_${b}_$1" x2="A_${d}_${b}_$2"
            line="  batch $b $d: ampc $(ratio "$(median ${!x1-})" "$(median ${!x2-})")"
            if [ "$d" = fp32 ]; then
                y1="T_${b}_$1" y2="T_${b}_$2"
                line+=", PyTorch $(ratio "$(median ${!y1-})" "$(median ${!y2-})")"
            fi
            echo "$line"
        done
    done
fi
echo "(ms/step: median wall time of the timed steps; CPU ms: CPU time a timed step, all"
echo " threads (ampc: /proc/PID/stat over the timed steps, needs BENCH_WARMUP >= 2),"
echo " the steadier figure on a loaded machine; RSS: peak resident set of the"
echo " process over the training steps (PyTorch's includes about ${base_torch:-230} MiB of interpreter"
echo " and libraries); MiB/smp: RSS / batch; ratio: ampc/PyTorch, time as the median of"
echo " the per-round pair ratios, AMP rows against PyTorch fp32; below 1 = ampc better)"
