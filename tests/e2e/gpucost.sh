#!/usr/bin/env bash
# The GPU cost model against the program the build emits, and its
# calibration (docs/gpucost.md, "The checks"); no GPU, no nvcc (-S only):
# - every example x --amp {off, float16, bfloat16}: --dump=gpu-cost lists
#   the same runtime calls, in the same order, as train_step and
#   moving_update of the emitted C (--target=cuda -S), each with a time
#   range 0 < fast <= slow;
# - every example: --report --target=cuda on h100 and h200 prints a step
#   range and the ten costliest calls;
# - --calibrate on synthetic profiles (the model's own per-call times,
#   middle of the range, scaled by known factors per family, and its
#   phases) recovers the factors; on ResNet-50 and resnext_mini;
# - --calibrate refuses a profile of another model, a file without a
#   profile record, and a malformed line (file:line);
# - every __global__ kernel of runtime/cuda/ has a row in ir/kernels.def.
# usage: gpucost.sh AMPC
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/lib.sh"

# calls_of_c C: the rt_cuda_* calls of train_step and moving_update, in order
calls_of_c() {
    awk '/^static void (train_step|moving_update)\(RtCtx \*ctx\)$/ { on = 1; next }
         on && /^}$/ { on = 0 }
         on { while (match($0, /rt_cuda_[a-z0-9_]*\(/)) {
                  f = substr($0, RSTART, RLENGTH - 1); $0 = substr($0, RSTART + RLENGTH)
                  if (f !~ /_workspace_bytes$/) print f } }' "$1"
}

# calls_of_dump DUMP: the emitted C's functions the dump prices, in order
calls_of_dump() { awk '$1 == "call" && ($2 == "train" || $2 == "moving") { print $4 }' "$1"; }

# ranges_ok DUMP: every call's time is a range 0 < fast <= slow
ranges_ok() {
    awk '$1 == "call" { for (i = 6; i <= NF; i++) if ($i ~ /^ms=/) { split(substr($i, 4), r, "[.][.]")
             if (!(r[1] > 0 && r[1] <= r[2])) { print "bad range: " $0; bad = 1 } } }
         END { exit bad }' "$1"
}

# every __global__ kernel of runtime/cuda/ has a description in ir/kernels.def
# (a GPUK, GPU_STEP or GPU_AUX row; test_gpucost_emu compares each row with
# what the emulator counts when the kernel runs)
: >"$tmp/log"
sed -n 's/^__global__ void \([a-z0-9_]*\)(.*/\1/p' runtime/cuda/*.cuh runtime/cuda/*.cu | sort -u >"$tmp/globals"
grep -o 'GPU\(K([A-Za-z0-9_]*, *[A-Z_]*, *\|_STEP("[^"]*", *\|_AUX(\)[a-z0-9_]*' ir/kernels.def |
    sed 's/.*[(, ]//' | sort -u >"$tmp/rows"
undescribed=$(comm -23 "$tmp/globals" "$tmp/rows" | tr '\n' ' ')
if [ -s "$tmp/globals" ] && [ -z "$undescribed" ]; then
    ok "every __global__ kernel of runtime/cuda/ ($(wc -l <"$tmp/globals")) has a row in ir/kernels.def"
else
    bad "kernels without a row in ir/kernels.def: ${undescribed:-none found}"
fi

n=0
for f in examples/*.sym; do
    m=$(basename "$f" .sym)
    for amp in off float16 bfloat16; do
        what="$m --amp=$amp"
        : >"$tmp/log"
        if ! "$ampc" "$f" --amp=$amp --target=cuda -S -o "$tmp/p.c" >>"$tmp/log" 2>&1 ||
            ! "$ampc" "$f" --amp=$amp --target=cuda --machine=h100 --dump=gpu-cost >"$tmp/d" 2>>"$tmp/log"; then
            bad "$what: -S or --dump=gpu-cost failed"
            continue
        fi
        calls_of_c "$tmp/p.c" >"$tmp/c.calls"
        calls_of_dump "$tmp/d" >"$tmp/d.calls"
        if [ ! -s "$tmp/c.calls" ]; then
            bad "$what: no rt_cuda_ call found in the emitted C"
        elif ! diff "$tmp/c.calls" "$tmp/d.calls" >>"$tmp/log"; then
            bad "$what: --dump=gpu-cost's calls differ from the emitted C's"
        elif ! ranges_ok "$tmp/d" >>"$tmp/log"; then
            bad "$what: a call's time is not a range 0 < fast <= slow"
        else
            n=$((n + 1))
        fi
    done
done
[ "$n" = $(($(ls examples/*.sym | wc -l) * 3)) ] &&
    ok "--dump=gpu-cost lists the emitted C's calls in order, each a range, in all $n programs (examples x amp)"

for f in examples/*.sym; do
    for mach in h100 h200; do
        : >"$tmp/log"
        "$ampc" "$f" --target=cuda --report --machine=$mach >"$tmp/rep" 2>>"$tmp/log"
        if grep -q "^gpu: step .* images/s$" "$tmp/rep" && grep -q '^gpu: the ten costliest calls' "$tmp/rep" &&
            [ "$(grep -A10 '^gpu: the ten costliest calls' "$tmp/rep" | grep -c '^gpu:   .* ms ')" -ge 1 ]; then
            :
        else
            cat "$tmp/rep" >>"$tmp/log"
            bad "$(basename "$f") on $mach: --report has no step range or costliest calls"
        fi
    done
done
ok "--report --target=cuda on h100 and h200: a step range and the costliest calls for every example"

# synth DUMP BATCH FACTORS: a profile record made of the dump's own per-call
# middles, each family's scaled by its factor ("conv_fwd=1.5 ..."), by node
# name; the optimizer and moving-update phases likewise
synth() {
    awk -v f="$3" -v batch="$2" '
    BEGIN { n = split(f, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); k[p[1]] = p[2] } }
    $1 == "call" {
        fam = ""; ms = ""
        for (i = 6; i <= NF; i++) { if ($i ~ /^family=/) fam = substr($i, 8); if ($i ~ /^ms=/) ms = substr($i, 4) }
        split(ms, r, "[.][.]"); t = (r[1] + r[2]) / 2 * k[fam]
        if ($2 == "moving") moving += t
        else if ($2 == "step" && fam == "optimizer") opt += t
        else if ($2 == "train") { if (!($5 in tot)) order[++no] = $5; tot[$5] += t }
    }
    END { printf "{\"event\":\"start\",\"batch_size\":%d}\n", batch
          printf "not JSON: a log line the reader skips\n"
          printf "{\"event\":\"profile\",\"steps\":3,\"phases_ms\":{\"data\":1,\"loss_scale_check\":%.17g,\"moving_update\":%.17g,\"optimizer\":0},\"calls\":[", opt, moving
          for (i = 1; i <= no; i++) printf "%s{\"name\":%s,\"op\":\"x\",\"pass\":\"forward\",\"dtype\":\"float16\",\"ms\":%.17g}", (i > 1 ? "," : ""), order[i], tot[order[i]]
          print "]}" }' "$1"
}

factors="conv_fwd=1.5 conv_dgrad=2 conv_wgrad=0.5 bn_fwd=0.01 bn_bwd=0.02 elementwise=3 pooling=0.25 loss_head=4 optimizer=0.7 copies=1.25 other=0.8"
for case in "resnet50_v1d 32" "resnext_mini 64"; do
    set -- $case
    : >"$tmp/log"
    "$ampc" examples/$1.sym --target=cuda --machine=h100 --batch-size=$2 --dump=gpu-cost >"$tmp/d" 2>>"$tmp/log"
    synth "$tmp/d" "$2" "$factors" >"$tmp/prof.jsonl"
    # the batch comes from the record's start event
    if "$ampc" examples/$1.sym --target=cuda --machine=h100 --calibrate "$tmp/prof.jsonl" >"$tmp/cal" 2>>"$tmp/log"; then
        cat "$tmp/cal" >>"$tmp/log"
        want=$(for kv in $factors; do printf '%s %.4f\n' "${kv%=*}" "${kv#*=}"; done)
        got=$(awk '$1 == "calibrate:" && $5 ~ /^[0-9]+[.][0-9][0-9][0-9][0-9]$/ { print $2, $5 }' "$tmp/cal")
        # every family the program has is recovered: the got ones are a subset of want
        missing=$(join -v1 <(sort <<<"$got") <(sort <<<"$want"))
        if [ -n "$got" ] && [ -z "$missing" ] && grep -q "matched, 0 not" "$tmp/cal" &&
            grep -q "batch $2:" "$tmp/cal"; then
            ok "--calibrate on $1 (batch $2 from the start event): recovers the factors of $(wc -l <<<"$got") families"
        else
            bad "--calibrate on $1: got $(tr '\n' ' ' <<<"$got")"
        fi
    else
        bad "--calibrate on $1 failed"
    fi
done

# the refusals
: >"$tmp/log"
"$ampc" examples/mlp.sym --target=cuda --machine=h100 --calibrate "$tmp/prof.jsonl" >"$tmp/out" 2>&1
rc=$?
grep -q 'of the profile.s .* calls name no call of this program' "$tmp/out" && [ "$rc" = 1 ] &&
    ok "--calibrate refuses another model's profile" || { cat "$tmp/out" >>"$tmp/log"; bad "another model's profile: exit $rc"; }
printf '{"event":"start","batch_size":8}\n' >"$tmp/none.jsonl"
"$ampc" examples/mlp.sym --target=cuda --calibrate "$tmp/none.jsonl" >"$tmp/out" 2>&1
rc=$?
grep -q 'holds no profile record' "$tmp/out" && [ "$rc" = 1 ] && ok "--calibrate: a file without a profile record" ||
    { cat "$tmp/out" >>"$tmp/log"; bad "a file without a profile record: exit $rc"; }
printf '{"event":"start","batch_size":8}\n{"event":"profile",\n' >"$tmp/cut.jsonl"
"$ampc" examples/mlp.sym --target=cuda --calibrate "$tmp/cut.jsonl" >"$tmp/out" 2>&1
rc=$?
grep -q 'cut.jsonl:2:1: error: --calibrate: a line starting with .{. is not one JSON object' "$tmp/out" && [ "$rc" = 1 ] &&
    ok "--calibrate: a malformed line is named by file:line" ||
    { cat "$tmp/out" >>"$tmp/log"; bad "a malformed line: exit $rc"; }
"$ampc" examples/mlp.sym --calibrate "$tmp/prof.jsonl" >"$tmp/out" 2>&1
rc=$?
grep -q 'prices the CUDA program: add --target=cuda' "$tmp/out" && [ "$rc" = 1 ] &&
    ok "--calibrate and --dump=gpu-cost need --target=cuda" || bad "--calibrate without --target=cuda: exit $rc"

echo "gpucost: $pass passed, $fail failed"
[ "$fail" = 0 ]
