#!/usr/bin/env bash
# compile_time.sh - front-end compile time against model size (make bench).
#
#   bench/compile_time.sh AMPC
#
# Times `AMPC FILE` (no flags: parse, elaborate and every pass of the
# pipeline, no output written) on ResNet-style models of 10, 100, 1,000 and
# 10,000 bottleneck blocks from bench/gen_resnet.sh, in two spellings:
#   loop      stage functions with `for` loops (short text, the DSL builds the blocks)
#   unrolled  every op of every block written out (text grows with the model)
#   from-ir   `AMPC --from-ir` on the loop model's dump after infer-types (the IR
#             reader, then the passes after infer-types)
# on chains of 200k and 1M relus imported from MXNet JSON, and on
# examples/resnet50_v1d.sym.  Each file is run once to warm the caches,
# then BENCH_REPS times (default 5; 3 for runs over a second), and the median
# time is printed with the node count, the cost per node and the peak RSS
# (from /usr/bin/time, when installed).  The time is CPU time from `perf stat`
# (task-clock) when perf works, as a busy machine disturbs it less; else (or
# with BENCH_WALL=1) wall time from bash's clock.
#
# The cost per node must stay flat as models grow: the script fails (exit 1)
# when the largest model of a spelling costs more than BENCH_MAX_RATIO (3) times
# per node what the 100-block one does, which a quadratic step would.
set -u
[ $# -eq 1 ] || { echo "usage: $0 AMPC" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[ -x "$ampc" ] || { echo "compile_time.sh: $1 is not an executable" >&2; exit 2; }
reps=${BENCH_REPS:-5}
max_ratio=${BENCH_MAX_RATIO:-3}
sizes=${BENCH_SIZES:-"10 100 1000 10000"}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ampc-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

now_us() { local t=${EPOCHREALTIME/[.,]/}; echo "$t"; }

# The time of one run in microseconds: CPU time (task-clock) with perf, which
# a busy shared machine disturbs less than wall time; wall time without it.
if [ -z "${BENCH_WALL:-}" ] && command -v perf >/dev/null &&
    perf stat -x, -e task-clock -o "$tmp/perf" true 2>/dev/null; then
    clock="CPU time (perf stat task-clock)"
    run_us() {
        perf stat -x, -e task-clock -o "$tmp/perf" "$@" >/dev/null 2>&1 || return 1
        awk -F, '$3 == "task-clock" {printf "%d", $1 * 1000}' "$tmp/perf"
    }
else
    clock="wall time"
    run_us() {
        local t0 t1
        t0=$(now_us)
        "$@" >/dev/null 2>&1 || return 1
        t1=$(now_us)
        echo $((t1 - t0))
    }
fi

# median of the arguments (integers)
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }

# bench LABEL FILE [FLAG]: times AMPC [FLAG] FILE; prints one row; sets row_us_per_node
bench() {
    local label=$1 file=$2 flag=${3:-} nodes lines t0 t1 us n=$reps times=() rss=-
    local cmd=("$ampc")
    [ -z "$flag" ] || cmd+=("$flag")
    cmd+=("$file")
    if ! nodes=$("${cmd[@]}" --report 2>"$tmp/err" | sed -nE '1s/^model .*: ([0-9]+) nodes( .*)?$/\1/p') ||
        [ -z "$nodes" ]; then
        echo "compile_time.sh: $label: ampc failed:" >&2
        head -5 "$tmp/err" >&2
        exit 1
    fi
    lines=$(wc -l <"$file")
    us=$(run_us "${cmd[@]}") || exit 1 # warm-up
    [ "$us" -lt 1000000 ] || n=$((reps < 3 ? reps : 3))
    for ((i = 0; i < n; i++)); do
        times+=("$(run_us "${cmd[@]}")")
    done
    us=$(median "${times[@]}")
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -f '%M' -o "$tmp/rss" "${cmd[@]}" >/dev/null 2>&1
        rss=$(awk '{printf "%.0f", $1 / 1024}' "$tmp/rss")
    fi
    row_us_per_node=$(awk -v us="$us" -v n="$nodes" 'BEGIN {printf "%.2f", us / n}')
    printf '%-24s %8s %9s %10.1f %9s %8s %4s\n' "$label" "$lines" "$nodes" \
        "$(awk -v us="$us" 'BEGIN {print us / 1000}')" "$row_us_per_node" "$rss" "$n"
}

# flatness KIND LAST BASE AT BASE_AT: says how the cost per node at the
# largest size (LAST us) compares with that at the base (BASE); status 1
# when more than max_ratio times
flatness() {
    local ratio verdict=flat
    ratio=$(awk -v a="$2" -v b="$3" 'BEGIN {printf "%.2f", a / b}')
    if awk -v r="$ratio" -v m="$max_ratio" 'BEGIN {exit !(r > m)}'; then
        verdict="NOT flat (more than ${max_ratio}x): look for a quadratic step (docs/performance.md)"
        status=1
    fi
    echo "  $1: cost per node at $4 is ${ratio}x that at $5: $verdict"
}

echo "ampc front-end compile time: $("$ampc" --version), $(nproc) cores, median $clock of $reps runs"
printf '%-24s %8s %9s %10s %9s %8s %4s\n' model lines nodes ms us/node "MiB" runs
bench resnet50_v1d.sym "$root/examples/resnet50_v1d.sym"
status=0
for kind in loop unrolled from-ir; do
    base='' last='' lastn=''
    for n in $sizes; do
        if [ $kind = from-ir ]; then
            "$ampc" "$tmp/loop$n.sym" --dump=infer-types >"$tmp/loop$n.ir" || exit 1
            bench "$kind $n blocks" "$tmp/loop$n.ir" --from-ir
        else
            "$root/bench/gen_resnet.sh" "$kind" "$n" >"$tmp/$kind$n.sym" || exit 1
            bench "$kind $n blocks" "$tmp/$kind$n.sym"
        fi
        [ "$n" = 100 ] && base=$row_us_per_node
        last=$row_us_per_node lastn=$n
    done
    if [ -n "$base" ] && [ "$lastn" != 100 ]; then
        flatness "$kind" "$last" "$base" "$lastn blocks" "100 blocks"
    fi
done
# Chains of relus imported from MXNet JSON (--from-mxnet), to the 1M-node
# limit: the shape that made elaboration quadratic (issue 21: 200k nodes took
# over a minute); tests/unit/test_passes.c holds it linear by count.
base=''
for n in ${BENCH_CHAIN_SIZES:-200000 999999}; do
    awk -v n="$n" 'BEGIN {
        print "{\"nodes\": [{\"op\": \"null\", \"name\": \"data\", \"attrs\": {\"__shape__\": \"(1,4)\"}, \"inputs\": []},"
        for (i = 1; i <= n; i++)
            printf "{\"op\": \"relu\", \"name\": \"r%d\", \"inputs\": [[%d, 0, 0]]}%s\n", i, i - 1, i < n ? "," : ""
        printf "], \"heads\": [[%d, 0, 0]]}\n", n
    }' >"$tmp/chain$n.json"
    bench "chain $n (JSON)" "$tmp/chain$n.json" --from-mxnet
    [ -n "$base" ] || base=$row_us_per_node basen=$n
    last=$row_us_per_node lastn=$n
done
if [ -n "$base" ] && [ "$lastn" != "$basen" ]; then
    flatness chain "$last" "$base" "$lastn nodes" "$basen"
fi
exit $status
