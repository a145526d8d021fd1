#!/usr/bin/env bash
# first_run_dry.sh BUILD - the first-run kit without a GPU (make check, in e2e
# through make gpu-check-dry): tests/gpu/first_run.sh --dry on the pack
# (BUILD/gpu.tar.gz, as a GPU machine gets it) runs every CPU half and passes;
# its output folder holds exactly table.txt, logs.tar and summary.jsonl, one
# summary line and one log per row; then with --plant-timeout and a 20 s
# deadline: the planted row is killed at its 2 s limit and marked TIMEOUT,
# the next row (env) runs, the row that outlives the deadline is killed, the
# rest are marked SKIPPED, the run exits 1, and still only the three files.
# Also make gpu-check's own dry run (gpu_check.sh --dry --no-build).
set -u
B=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../e2e/lib.sh"
pack=$B/gpu.tar.gz
finish() {
    echo "first_run_dry: $pass passed, $fail failed"
    [ "$fail" = 0 ]
    exit
}
[ -f "$pack" ] || { bad "no $pack (make gpu-check-pack)"; finish; }

# three_files DIR NROWS: exactly the three files, one summary line and one log per row
three_files() {
    local dir=$1 n=$2 files
    files=$(cd "$dir" && ls -A | tr '\n' ' ')
    [ "$files" = "logs.tar summary.jsonl table.txt " ] || { echo "files: $files"; return 1; }
    [ "$(wc -l <"$dir/summary.jsonl")" = "$n" ] || { echo "summary lines"; return 1; }
    [ "$(tar -tf "$dir/logs.tar" | wc -l)" = "$n" ] || { echo "logs in the tar"; return 1; }
    python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    assert sorted(r) == ["figures", "limit_s", "ms", "name", "rc", "result", "verdict"], r
    assert r["verdict"] in ("ok", "n/a", "info", "FAIL", "TIMEOUT", "SKIPPED"), r' "$dir/summary.jsonl"
}
verdict() { awk -v r="$2" '$1 == r {print $2}' "$1/table.txt"; }

out=$tmp/dry
if "$here/first_run.sh" --dry "$pack" "$out" >"$tmp/log" 2>&1; then
    n=$(grep -c . "$out/summary.jsonl")
    if three_files "$out" "$n" >>"$tmp/log" 2>&1 && [ "$n" -ge 15 ] &&
        [ "$(verdict "$out" cudnn-check)" = ok ] && [ "$(verdict "$out" libs)" = ok ] &&
        [ "$(verdict "$out" step-resnet2)" = n/a ]; then
        ok "first_run.sh --dry on the pack: $n rows, every CPU half passed ($(grep -c ' ok ' "$out/table.txt") ok, $(grep -c ' n/a ' "$out/table.txt") n/a), 3 files"
    else
        cat "$tmp/log"
        bad "first_run.sh --dry: its files or rows"
    fi
else
    cat "$tmp/log"
    bad "first_run.sh --dry failed"
fi

out=$tmp/planted
"$here/first_run.sh" --dry --plant-timeout --deadline 12 "$pack" "$out" >"$tmp/log" 2>&1
rc=$?
n=$(grep -c . "$out/summary.jsonl" 2>/dev/null)
env_ran=0
case $(verdict "$out" env) in info | n/a | ok) env_ran=1 ;; esac
if [ $rc = 1 ] && three_files "$out" "$n" >>"$tmp/log" 2>&1 &&
    [ "$(verdict "$out" planted-timeout)" = TIMEOUT ] && [ $env_ran = 1 ] &&
    [ "$(verdict "$out" planted-deadline)" = TIMEOUT ] &&
    [ "$(verdict "$out" r50-waits)" = SKIPPED ] &&
    [ "$(grep -c ' SKIPPED ' "$out/table.txt")" -ge 10 ]; then
    ok "a planted row past its 2 s limit is killed and marked, env runs after it, a row past the 12 s deadline is killed and the $(grep -c ' SKIPPED ' "$out/table.txt") rows after it are SKIPPED (exit 1, 3 files)"
else
    cat "$tmp/log" "$out/table.txt"
    bad "the planted timeout and deadline (exit $rc)"
fi

out=$tmp/check
if GPU_CHECK_LOGS=$out "$here/gpu_check.sh" --dry --no-build "$B" >"$tmp/log" 2>&1 &&
    three_files "$out" "$(grep -c . "$out/summary.jsonl")" >>"$tmp/log" 2>&1 &&
    [ "$(verdict "$out" r50-kv-local)" = n/a ]; then
    ok "make gpu-check --dry: the kit with --full, the same three files"
else
    cat "$tmp/log"
    bad "gpu_check.sh --dry"
fi
finish
