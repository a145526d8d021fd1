#!/usr/bin/env bash
# diff.sh - the time of ampc diff on ResNet-50 v1d's training graph (make bench).
#
#   bench/diff.sh AMPC
#
# Times, on examples/resnet50_v1d.sym with --amp=float16 --target=cpu (1,063
# nodes in the scheduled training graph, 414 more in the inference graph):
#   json     two ampc-graph documents (the golden of examples/ci against a
#            fresh dump): reading, matching by name, comparing;
#   renamed  the same with every relu renamed (relu -> act): the rename
#            matching runs to its fixed point over 80 nodes;
#   ir       a text dump against a JSON document (the dump read and checked
#            as --from-ir does);
#   model    the model file against the JSON document: the compile (a child
#            ampc) included.
# Each is run once to warm the caches, then BENCH_REPS times (default 5), and
# the median wall time is printed.  The script fails (exit 1) when the json
# case takes BENCH_DIFF_MAX_MS (default 1000) or more: well under a second
# is the goal (docs/ci.md).
set -u
[ $# -eq 1 ] || { echo "usage: $0 AMPC" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[ -x "$ampc" ] || { echo "diff.sh: $1 is not an executable" >&2; exit 2; }
reps=${BENCH_REPS:-5}
max_ms=${BENCH_DIFF_MAX_MS:-1000}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ampc-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$root" || exit 2

now_us() { local t=${EPOCHREALTIME/[.,]/}; echo "$t"; }

rn=examples/resnet50_v1d.sym
f=(--amp=float16 --target=cpu)
"$ampc" $rn "${f[@]}" --dump=schedule --dump-format=json > "$tmp/a.json"
"$ampc" $rn "${f[@]}" --dump=schedule > "$tmp/a.ir"
sed 's/\<relu(/act(/g' $rn > "$tmp/renamed.sym"
"$ampc" "$tmp/renamed.sym" "${f[@]}" --dump=schedule --dump-format=json > "$tmp/renamed.json"

# median wall time (ms) of `ampc diff ARGS...` (exit 0 or 1 expected)
time_diff() {
    local i t0 t1 times=()
    "$ampc" diff "$@" > /dev/null 2>&1
    [ $? -le 1 ] || { echo "diff.sh: ampc diff $* failed" >&2; exit 2; }
    for ((i = 0; i < reps; i++)); do
        t0=$(now_us)
        "$ampc" diff "$@" > /dev/null 2>&1
        t1=$(now_us)
        times+=($((t1 - t0)))
    done
    printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((reps + 1) / 2))p" |
        awk '{ printf "%.1f", $1 / 1000 }'
}

printf '%-8s %10s  %s\n' case "ms" "ampc diff on ResNet-50 v1d's training graph (median of $reps)"
json=$(time_diff examples/ci/golden/resnet50_v1d.json "$tmp/a.json")
printf '%-8s %10s\n' json "$json"
printf '%-8s %10s\n' renamed "$(time_diff "$tmp/a.json" "$tmp/renamed.json")"
printf '%-8s %10s\n' ir "$(time_diff "$tmp/a.ir" "$tmp/a.json")"
printf '%-8s %10s\n' model "$(time_diff "$tmp/a.json" $rn "${f[@]}")"
if awk -v t="$json" -v m="$max_ms" 'BEGIN { exit !(t >= m) }'; then
    echo "diff.sh: the json case took $json ms, not under $max_ms" >&2
    exit 1
fi
