#!/usr/bin/env bash
# Generated graphs as CI artifacts (docs/ci.md): the checks `make ci-check`
# runs.
#
#   tests/ci/run.sh build/ampc
#
#   names     the full name list of ResNet-50 v1d's training graph under
#             --amp=float16 is tests/ci/resnet50_v1d_f16.names (a change to
#             the naming rule must update it and bump the schema versions);
#   shuffle   every JSON graph document of every example (each pass, AMP off
#             and float16) and the report's graph facts are byte-identical
#             under three --shuffle-seed values;
#   schemas   every kind of document validates against its closed schema in
#             docs/schema/ with Debian's python3-jsonschema, and documents
#             with a misspelled key or a missing field are refused
#             (tests/ci/schemas.py); docs/report.md is what
#             tools/schema_doc.py makes of report.schema.json;
#   diff      ampc diff: equal inputs exit 0 in any mix (model, text dump in
#             either --dump-ids form, JSON, a previous version's document),
#             one inserted Dropout is reported in at most 5 lines, renamed
#             nodes are paired, --ignore, --format=json, provenance compared
#             only when asked, exit 2 on an error;
#   examples  examples/ci/ci.sh passes on today's models and fails, with a
#             one-line reason, on each planted regression: an --amp-exclude
#             that adds casts, one inserted Dropout, a changed channel count,
#             a memory plan that grew.
#
# Set CI_CHECKS to a list of the names above to run fewer.
set -u
if [ $# -ne 1 ]; then
    echo "usage: $0 path/to/ampc" >&2
    exit 2
fi
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
py=/usr/bin/python3 # Debian's, with python3-jsonschema (the first python3 on PATH may lack it)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    echo "FAIL $1"
    [ -s "$tmp/err" ] && sed 's/^/    /' "$tmp/err" | head -20
    : > "$tmp/err"
    return 0
}
want() { [ -z "${CI_CHECKS:-}" ] || [[ " $CI_CHECKS " == *" $1 "* ]]; }

# ---- names -----------------------------------------------------------------
if want names; then
    "$ampc" examples/resnet50_v1d.sym --amp=float16 --target=cpu --dump=schedule \
        --dump-format=json > "$tmp/rn.json"
    "$py" -c 'import json,sys
d = json.load(open(sys.argv[1]))
print(d["schema"]); print("\n".join(n["name"] for n in d["nodes"]))' "$tmp/rn.json" > "$tmp/names"
    pinned=tests/ci/resnet50_v1d_f16.names
    if [ "$(head -1 "$tmp/names")" != "$(sed -n '1s/^# \([^:]*\):.*/\1/p' "$pinned")" ]; then
        echo "the schema is $(head -1 "$tmp/names"), the pinned list was made under $(head -1 "$pinned")" > "$tmp/err"
        bad "names: the schema version of $pinned"
    elif diff <(tail -n +2 "$tmp/names") <(grep -v '^#' "$pinned") > "$tmp/err"; then
        ok
    else
        { echo "the naming rule changed (docs/ir.md, Names): bump the schema versions in"
          echo "compiler/driver.h, then regenerate $pinned (its header says how)"; } >> "$tmp/err"
        bad "names: ResNet-50 v1d's training graph has other names than $pinned"
    fi
fi

# ---- shuffle ----------------------------------------------------------------
if want shuffle; then
    for ex in examples/*.sym; do
        for amp in off float16; do
            name=$(basename "$ex" .sym).$amp
            for seed in 0 1 2 3; do
                s=(); [ $seed -gt 0 ] && s=(--shuffle-seed=$seed)
                mkdir -p "$tmp/sh$seed"
                # graphs: every pass; the report without the memory plan, the
                # program and the placement, which follow the execution order
                # the schedule pass picks from the stored one (docs/ci.md)
                "$ampc" "$ex" --amp=$amp --target=cpu "${s[@]}" --dump=all --dump-format=json \
                    --dump-dir="$tmp/sh$seed/d" --report=json > "$tmp/sh$seed/report.json" 2> "$tmp/err" ||
                    { bad "shuffle: $name seed $seed does not compile"; continue 2; }
                rm -f "$tmp/sh$seed"/d/*.memplan.json "$tmp/sh$seed"/d/*.program.json \
                      "$tmp/sh$seed"/d/*.kvstore.json
                "$py" -c 'import json,sys
d = json.load(open(sys.argv[1]))
for k in ("memplan", "placement", "predicted"): d[k] = None
json.dump(d, open(sys.argv[1], "w"), indent=1)' "$tmp/sh$seed/report.json"
            done
            for seed in 1 2 3; do
                if diff -r "$tmp/sh0" "$tmp/sh$seed" > "$tmp/err"; then ok
                else bad "shuffle: $name: --shuffle-seed=$seed changes a JSON document"; fi
            done
            rm -rf "$tmp"/sh?
        done
    done
fi

# ---- schemas ----------------------------------------------------------------
if want schemas; then
    d=$tmp/docs
    mkdir -p "$d"
    "$ampc" examples/resnet50_v1d.sym --amp=float16 --target=cpu --dump=all --dump-format=json \
        --dump-dir="$d/rn" --report=json --devices=2 > "$d/report.json"
    "$ampc" examples/mlp.sym --target=cpu --report=json --batch-size=32 > "$d/report_batch.json"
    "$ampc" examples/resnext_mini.sym --amp=bfloat16 --target=cuda --kernels=cpu \
        --dump=schedule --dump=program --dump-format=json --dump-dir="$d/cuda" > /dev/null
    # the GPU cost model's document (a machine with devices)
    "$ampc" examples/resnext_mini.sym --amp=float16 --target=cuda --machine=h100 \
        --dump=gpu-cost --dump-format=json > "$d/gpu-cost.json"
    # a model that does not train: its report has no plan and no placement
    printf 'model m(x: float32[N,4]) { return Activation(x, act_type="relu") }\n' > "$tmp/fwd.sym"
    "$ampc" "$tmp/fwd.sym" --report=json > "$d/report_fwd.json"
    "$ampc" diff examples/mlp.sym examples/mlp.sym --b-flags=--amp=float16 --format=json \
        > "$d/diff.json"
    if "$py" tests/ci/schemas.py "$d"/*.json "$d"/rn/*.json "$d"/cuda/*.json > "$tmp/err" 2>&1; then
        ok; cat "$tmp/err"; : > "$tmp/err"
    else bad "schemas: a document does not validate, or a broken one does"; fi
    if "$py" tools/schema_doc.py docs/schema/report.schema.json | diff docs/report.md - > "$tmp/err"; then ok
    else bad "schemas: docs/report.md is not what tools/schema_doc.py makes of the schema"; fi
fi

# ---- diff --------------------------------------------------------------------
# dodiff WANT_RC ARGS...: ampc diff's exit status, output in $tmp/out
dodiff() {
    local want=$1
    shift
    "$ampc" diff "$@" > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    [ $rc = "$want" ] || { echo "exit $rc, not $want; stdout:" >> "$tmp/err"; cat "$tmp/out" >> "$tmp/err"; return 1; }
}
if want diff; then
    rn=examples/resnet50_v1d.sym
    f=(--amp=float16 --target=cpu)
    "$ampc" $rn "${f[@]}" --dump=schedule > "$tmp/rn.ir"
    "$ampc" $rn "${f[@]}" --dump=schedule --dump-ids=names > "$tmp/rn.names.ir"
    "$ampc" $rn "${f[@]}" --dump=schedule --dump-format=json > "$tmp/rn.json"
    "$ampc" $rn "${f[@]}" --report=json > "$tmp/rn.report.json"
    for pair in "$rn $rn" "$rn $tmp/rn.ir" "$tmp/rn.names.ir $tmp/rn.json" "$tmp/rn.json $rn" \
                "$tmp/rn.report.json $rn" "tests/ci/fixtures/mlp.graph-v1.json examples/mlp.sym"; do
        read -r -a p <<< "$pair"
        if dodiff 0 "${p[@]}" --target=cpu $([ "${p[1]}" = $rn ] && echo --amp=float16); then ok
        else bad "diff: $pair: not equal"; fi
    done
    # one Dropout inserted after stage 3: at most 5 lines, naming it
    sed 's/^    x = stage(x, 256, 6)$/&\n    x = Dropout(x, p=0.2)/' $rn > "$tmp/drop.sym"
    if dodiff 1 "$tmp/rn.json" "$tmp/drop.sym" "${f[@]}" && [ "$(wc -l < "$tmp/out")" -le 5 ] &&
       grep -q '^nodes: .* +dropout1 (Dropout' "$tmp/out"; then ok
    else cat "$tmp/out" >> "$tmp/err"; bad "diff: one inserted Dropout in at most 5 lines"; fi
    # a function renamed (relu -> act) renames every node it makes and
    # what autodiff makes from them: all paired, through their readers
    sed 's/\<relu(/act(/g' $rn > "$tmp/ren.sym"
    if dodiff 1 $rn "$tmp/ren.sym" "${f[@]}" && [ "$(wc -l < "$tmp/out")" = 1 ] &&
       grep -q '^renames: .*stage1_block1_relu1 -> stage1_block1_act1' "$tmp/out"; then ok
    else cat "$tmp/out" >> "$tmp/err"; bad "diff: renamed nodes are paired (one class: renames)"; fi
    # --ignore: an --amp-exclude changes casts, dtypes, params, attrs, memplan only
    x=--b-flags=--amp-exclude=stage2_block1_conv1
    if dodiff 1 $rn $rn "${f[@]}" "$x" && grep -q '^casts: ' "$tmp/out" &&
       dodiff 0 $rn $rn "${f[@]}" "$x" --ignore=casts,dtypes,params,attrs,memplan; then ok
    else bad "diff: --ignore leaves out the classes named"; fi
    if dodiff 1 $rn $rn "${f[@]}" "$x" --format=json &&
       "$py" -c 'import json,sys; d = json.load(open(sys.argv[1])); assert not d["equal"]
assert [c["class"] for c in d["classes"]][:1] == ["casts"], d["classes"]' "$tmp/out" 2>> "$tmp/err"; then ok
    else bad "diff: --format=json"; fi
    # provenance: ignored unless asked (same graph, other input and flags)
    if dodiff 0 "$tmp/rn.json" $rn --target=cpu --amp=float16 &&
       dodiff 1 "$tmp/rn.json" $rn --target=cpu --amp=float16 --compare-provenance &&
       grep -q '^provenance: ' "$tmp/out"; then ok
    else bad "diff: provenance compared only with --compare-provenance"; fi
    # errors: exit 2
    echo '{"schema": "ampc-graph/99"}' > "$tmp/v99.json"
    if dodiff 2 "$tmp/v99.json" $rn && dodiff 2 $rn && dodiff 2 $rn $rn --ignore=nodez &&
       dodiff 2 /nonexistent $rn && dodiff 2 "$tmp/rn.json" "$tmp/rn.report.json"; then ok
    else bad "diff: errors exit 2"; fi
    # hostile documents: refused with a message (exit 2), never a crash
    n=0
    while IFS= read -r doc; do
        n=$((n + 1))
        printf '%s\n' "$doc" > "$tmp/h$n.json"
        if dodiff 2 "$tmp/h$n.json" examples/ci/golden/mlp.json && grep -q 'ampc diff: error: ' "$tmp/err"; then ok
        else bad "diff: hostile document $n: $doc"; fi
    done <<'DOCS'
{"schema": "ampc-graph/1", "nodes": [{"name": 1}]}
{"schema": "ampc-graph/1", "nodes": [{"name": "a", "op": "Input", "dtype": "f32", "shape": "[N]", "layout": "nchw", "inputs": ["b"], "attrs": [null]}]}
{"schema": "ampc-graph/1", "nodes": [{"name": "", "op": "", "dtype": "", "shape": "", "layout": "", "inputs": [], "attrs": []}]}
{"schema": "ampc-graph/1", "nodes": [{"name": "a", "op": "Input", "dtype": "f32", "shape": "[N", "layout": "nchw", "inputs": [], "attrs": []}]}
{"schema": "ampc-graph/1", "nodes": [{"name": "a", "op": "Input", "dtype": "f32", "shape": "[N]", "layout": "nchw", "inputs": [], "attrs": []}, {"name": "a", "op": "Input", "dtype": "f32", "shape": "[N]", "layout": "nchw", "inputs": [], "attrs": []}]}
{"schema": "ampc-graph/1", "nodes": "x"}
{"schema": "ampc-report/1", "memplan": {"fixed_bytes": "x"}, "placement": 3}
[1, 2]
{"schema": 
DOCS
    # a parameter of 10^22 elements: counted saturating, compared, no overflow
    echo '{"schema": "ampc-graph/1", "nodes": [{"name": "a", "op": "Param", "dtype": "f32", "shape": "[99999999999,99999999999]", "layout": "nchw", "inputs": [], "attrs": [null, 3]}], "train": [{"key": null, "value": {"a": [1]}}]}' > "$tmp/big.json"
    if dodiff 1 "$tmp/big.json" examples/ci/golden/mlp.json && grep -q '^params: trainable 9223372036854775807 -> 17226' "$tmp/out"; then ok
    else bad "diff: a parameter too large for int64"; fi
fi

# ---- examples/ci ----------------------------------------------------------------
if want examples; then
    if examples/ci/ci.sh --ampc "$ampc" examples examples/ci/golden > "$tmp/out" 2> "$tmp/err"; then ok
    else cat "$tmp/out" >> "$tmp/err"; bad "examples/ci/ci.sh fails on today's models"; fi
    # planted regressions, each in a copy of the repository's models and goldens
    plant() { # what, sed expression on resnet50_v1d.sym, extra flags, expected reason (regex)
        rm -rf "$tmp/m" "$tmp/g"
        mkdir -p "$tmp/m"
        cp -r examples/ci/golden "$tmp/g"
        sed "$2" examples/resnet50_v1d.sym > "$tmp/m/resnet50_v1d.sym"
        [ -n "$3" ] && echo "$(cat "$tmp/g/resnet50_v1d.flags") $3" > "$tmp/g/resnet50_v1d.flags"
        if examples/ci/ci.sh --ampc "$ampc" "$tmp/m" "$tmp/g" resnet50_v1d > "$tmp/out" 2>&1; then
            echo "ci.sh passed" > "$tmp/err"; bad "examples/ci: $1 is not caught"
        elif [ "$(wc -l < "$tmp/out")" != 1 ] || ! grep -qE "^FAIL resnet50_v1d: $4" "$tmp/out"; then
            cat "$tmp/out" > "$tmp/err"; bad "examples/ci: $1: not one line matching '$4'"
        else ok; fi
    }
    plant "an --amp-exclude that adds casts" '' --amp-exclude=stage3_block2_conv2 'casts: [0-9]+ -> [0-9]+ \(\+'
    plant "one inserted Dropout" 's/^    x = stage(x, 128, 4)$/&\n    x = Dropout(x, p=0.1)/' '' \
        'nodes: .*\+dropout1 \(Dropout'
    plant "a changed channel count" 's/^    x = stage(x, 256, 6)$/    x = stage(x, 320, 6)/' '' \
        'shapes: '
    plant "a memory plan that grew" '' --no-inplace \
        '.*resnet50_v1d.expect:[0-9]+:[0-9]+: error: expected memplan.per_sample_bytes == [0-9]+, got [0-9]+'
fi

echo "ci: $pass passed, $fail failed"
[ $fail -eq 0 ]
