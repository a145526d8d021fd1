#!/usr/bin/env bash
# End-to-end tests of the training program (docs/training.md) on compiled
# models, on the CPU:
#   1. convergence on digits, mean over 3 seeds: digits_cnn's train block (NAG,
#      cosine schedule with a warm-up epoch) reaches 95% in fp32 in 4 epochs,
#      and --amp=float16 (dynamic loss scaling) is within one point of it;
#   2. underflow: digits_cnn with the head gradient scaled by 1e-8 (and lr x
#      1e8) learns in fp32 and in fp16 with dynamic loss scaling (>= 90%), and
#      does not learn in fp16 without it (< 30%);
#   3. overflow injection: the step made to overflow is skipped: parameters,
#      momentum, BatchNorm moving statistics and the update count in the
#      checkpoints written just before and just after it are bit-identical,
#      the loss scale halves, and training goes on to converge;
#   4. resume: 4 epochs in one run and 2 + 2 with --resume give byte-identical
#      checkpoints and the same logged losses; --eval-only on a checkpoint
#      reproduces its validation accuracy;
#   5. broken checkpoints (truncated at several offsets, a flipped byte,
#      another model's) are refused with a message naming the file;
#   6. --check-numerics names the node of an injected NaN; bad flags exit 2;
#   7. Adam (multi-precision, fp16): learns digits, and 2 epochs straight
#      against 1 + resume 1 give byte-identical checkpoints (mean, var and
#      the step count carried);
#   8. schedules through the driver: the lr of every --json-log speedometer
#      event equals MXNet's PolyScheduler / FactorScheduler formula;
#   9. --json-log: every line parses as JSON (no NaN/Infinity tokens), every
#      event has its documented fields, overflow and loss-scale events appear;
#  10. --profile prints phases that add up to the step, node kinds and nodes;
#  11. cifar10 on small generated files through the driver: counts, the
#      per-channel normalisation of every value of a batch (--dump-state),
#      --augment crop=4,mirror runs; --augment refused for digits;
#  12. every train-block key (tests/golden/driver/train_settings_all.sym)
#      reaches the program, which runs with them; its flags override them.
# usage: training.sh AMPC DATA_DIR
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$2
. "$(dirname "$0")/lib.sh"
export AMPC_DATA_DIR=$data
start=$(date +%s)

# the runtime next to ampc (codegen/build.c finds it there too)
lib=$(dirname "$ampc")/libampcrt.a
if ! cc -std=c11 -Wall -Wextra -Werror -Iruntime tests/e2e/ckpt_tool.c "$lib" -lopenblas -lz -lm \
        -o "$tmp/ckpt_tool" >"$tmp/log" 2>&1; then
    bad "building tests/e2e/ckpt_tool.c"
    
    echo "training: $pass passed, $fail failed"
    exit 1
fi
ck=$tmp/ckpt_tool
for amp in off float16; do
    "$ampc" examples/digits_cnn.sym --amp=$amp -o "$tmp/cnn_$amp" >"$tmp/log" 2>&1 ||
        bad "compiling digits_cnn --amp=$amp"
    "$ampc" tests/e2e/models/digits_cnn_tiny_grad.sym --amp=$amp -o "$tmp/tiny_$amp" >"$tmp/log" 2>&1 ||
        bad "compiling digits_cnn_tiny_grad --amp=$amp"
done
final() { sed -n 's/^Final validation-accuracy=//p' "$1"; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# 1. convergence, mean over 3 seeds
declare -A mean
for amp in off float16; do
    accs=""
    for seed in 1 2 3; do
        "$tmp/cnn_$amp" --data digits --epochs 4 --seed $seed --log-interval 0 >"$tmp/log" 2>&1 ||
            bad "digits_cnn --amp=$amp seed $seed run"
        accs="$accs $(final "$tmp/log")"
    done
    mean[$amp]=$(echo "$accs" | awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; printf "%.4f", s / NF }')
    echo "    digits_cnn --amp=$amp, NAG + cosine with warm-up, 4 epochs, seeds 1-3:$accs (mean ${mean[$amp]})"
done
if ge "${mean[off]}" 0.95; then
    ok "digits_cnn fp32: mean validation accuracy ${mean[off]} over 3 seeds (>= 0.95)"
else
    bad "digits_cnn fp32: mean validation accuracy ${mean[off]} < 0.95"
fi
if awk -v a="${mean[off]}" -v b="${mean[float16]}" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }'; then
    ok "digits_cnn --amp=float16: mean ${mean[float16]}, within one point of fp32's ${mean[off]}"
else
    bad "digits_cnn --amp=float16: mean ${mean[float16]}, fp32 ${mean[off]}: more than one point apart"
fi

# 2. underflow: the head gradient is <= 1e-8, below fp16's smallest subnormal
run_tiny() { # amp loss-scale -> accuracy
    "$tmp/tiny_$1" --data digits --log-interval 0 --loss-scale "$2" >"$tmp/log" 2>&1 && final "$tmp/log"
}
a32=$(run_tiny off off)
if [ -n "$a32" ] && ge "$a32" 0.90; then
    ok "grad_scale=1e-8, lr x 1e8: fp32 learns ($a32 >= 0.90)"
else bad "grad_scale=1e-8 fp32: '$a32'"; fi
a16off=$(run_tiny float16 off)
if [ -n "$a16off" ] && lt "$a16off" 0.30; then
    ok "grad_scale=1e-8: fp16 without loss scaling does not learn ($a16off < 0.30: the head gradient rounds to 0)"
else bad "grad_scale=1e-8 fp16, loss scale off: '$a16off' (expected < 0.30)"; fi
a16dyn=$(run_tiny float16 dynamic)
if [ -n "$a16dyn" ] && ge "$a16dyn" 0.90; then
    ok "grad_scale=1e-8: fp16 with dynamic loss scaling learns ($a16dyn >= 0.90)"
else bad "grad_scale=1e-8 fp16, dynamic: '$a16dyn'"; fi

# 3. overflow injection at step K: checkpoints after K steps and after K+1
K=30
d=$tmp/inj; mkdir -p "$d"
"$tmp/cnn_float16" --data digits --max-steps $K --log-interval 0 --save-dir "$d/before" >"$tmp/log" 2>&1 &&
"$tmp/cnn_float16" --data digits --max-steps $((K+1)) --inject-inf-at-step $K --log-interval 0 \
    --save-dir "$d/after" >"$tmp/log" 2>&1
rc=$?
"$ck" show "$d/before/digits_cnn-$(printf step%06d $K).ckpt" >"$d/before.txt" 2>>"$tmp/log"
"$ck" show "$d/after/digits_cnn-$(printf step%06d $((K+1))).ckpt" >"$d/after.txt" 2>>"$tmp/log"
val() { sed -n "s/^$1 //p" "$2"; }
if [ $rc -eq 0 ] && [ -s "$d/before.txt" ] &&
   grep -q "^Epoch\[0\] Batch \[$K\]	AMP: gradient overflow at step $K: step skipped" "$tmp/log" &&
   diff <(grep -E '^(param|num_update|nonfinite)' "$d/before.txt") \
        <(grep -E '^(param|num_update|nonfinite)' "$d/after.txt") >"$tmp/diff" &&
   [ "$(val step "$d/after.txt")" = $((K+1)) ] &&
   [ "$(val skipped "$d/after.txt")" = $(( $(val skipped "$d/before.txt") + 1 )) ] &&
   awk -v a="$(val loss_scale "$d/before.txt")" -v b="$(val loss_scale "$d/after.txt")" 'BEGIN { exit !(b == a / 2) }' &&
   [ "$(val loss_scale_tracker "$d/after.txt")" = 0 ]; then
    ok "an overflow at step $K is skipped: $(grep -c '^param' "$d/before.txt") parameter tensors (weights, BatchNorm moving statistics) and their momentum bit-identical, update count $(val num_update "$d/after.txt") unchanged, loss scale $(val loss_scale "$d/before.txt") -> $(val loss_scale "$d/after.txt")"
else
    bad "overflow injection at step $K (rc $rc)"
    cat "$tmp/diff" 2>/dev/null | head -5
fi
if "$tmp/cnn_float16" --data digits --epochs 4 --inject-inf-at-step 50 --log-interval 0 >"$tmp/log" 2>&1 &&
   grep -q "AMP: gradient overflow at step 50" "$tmp/log" && ge "$(final "$tmp/log")" 0.90; then
    ok "training goes on after the skipped step and converges ($(final "$tmp/log"))"
else bad "training after an injected overflow"; fi

# 4. resume: 4 epochs straight against 2 + 2
d=$tmp/resume; mkdir -p "$d"
"$tmp/cnn_float16" --data digits --epochs 4 --log-interval 10 --save-dir "$d/a" >"$d/a.log" 2>&1 &&
"$tmp/cnn_float16" --data digits --epochs 4 --max-steps 92 --log-interval 10 --save-dir "$d/b" >"$d/b1.log" 2>&1 &&
"$tmp/cnn_float16" --data digits --epochs 4 --log-interval 10 --save-dir "$d/b" \
    --resume "$d/b/digits_cnn-0002.ckpt" >"$d/b2.log" 2>&1
rc=$?
strip() { grep -E '^Epoch\[[0-9]+\] (Batch|Train-|Validation-|Loss-scale)|^AMP' "$@" | sed 's/Speed: [0-9.]* samples\/sec//'; }
if [ $rc -eq 0 ] && cmp -s "$d/a/digits_cnn-0004.ckpt" "$d/b/digits_cnn-0004.ckpt" &&
   diff <("$ck" show "$d/a/digits_cnn-0004.ckpt") <("$ck" show "$d/b/digits_cnn-0004.ckpt") >/dev/null &&
   diff <(strip "$d/a.log") <(cat "$d/b1.log" "$d/b2.log" | strip) >"$tmp/diff" &&
   [ "$(strip "$d/a.log" | grep -c Batch)" -gt 10 ]; then
    ok "resume: 4 epochs and 2 + 2 give byte-identical checkpoints and the same $(strip "$d/a.log" | wc -l) logged metric lines"
else
    bad "resume (rc $rc)"
    head -5 "$tmp/diff" 2>/dev/null
fi
acc=$(sed -n 's/^Epoch\[3\] Validation-accuracy=//p' "$d/a.log")
if "$tmp/cnn_float16" --data digits --eval-only --resume "$d/a/digits_cnn-0004.ckpt" >"$tmp/log" 2>&1 &&
   [ "$(sed -n 's/^Validation-accuracy=//p' "$tmp/log")" = "$acc" ] && [ "$(final "$tmp/log")" = "$acc" ] &&
   ! grep -q Batch "$tmp/log"; then
    ok "--eval-only --resume reproduces the checkpoint's validation accuracy ($acc)"
else bad "--eval-only"; fi

# 5. broken checkpoints are refused, naming the file
good=$d/a/digits_cnn-0004.ckpt
[ -f "$good" ] || cp "$d/../inj/before/digits_cnn-0001.ckpt" "$good" 2>/dev/null
size=$(stat -c %s "$good" 2>/dev/null || echo 0)
refused=0 tried=0
[ "$size" -gt 1000 ] || bad "no checkpoint to break"
for off in 0 4 8 20 31 32 33 100 $((size/2)) $((size-4)) $((size-1)); do
    tried=$((tried+1))
    head -c $off "$good" >"$tmp/cut.params"
    "$tmp/cnn_float16" --data digits --eval-only --resume "$tmp/cut.params" >"$tmp/log" 2>&1
    [ $? -eq 1 ] && grep -q "checkpoint $tmp/cut.params" "$tmp/log" && refused=$((refused+1))
done
for off in 3 12 17 26 29 40 $((size/3)) $((size-1)); do
    tried=$((tried+1))
    cp "$good" "$tmp/flip.params"
    byte=$(od -An -tu1 -j $off -N1 "$good" | tr -d ' ')
    printf "$(printf '\\%03o' $(( byte ^ 0x10 )))" | dd of="$tmp/flip.params" bs=1 seek=$off conv=notrunc 2>/dev/null
    "$tmp/cnn_float16" --data digits --eval-only --resume "$tmp/flip.params" >"$tmp/log" 2>&1
    [ $? -eq 1 ] && grep -q "checkpoint $tmp/flip.params" "$tmp/log" && refused=$((refused+1))
done
if [ "$size" -gt 1000 ] && [ $refused -eq $tried ]; then
    ok "$tried truncated or corrupted checkpoints are refused with a message naming the file"
else bad "only $refused of $tried broken checkpoints refused"; fi
"$ampc" examples/mlp.sym -o "$tmp/mlp" >"$tmp/log" 2>&1 &&
    "$tmp/mlp" --data digits --max-steps 2 --log-interval 0 --save-dir "$tmp/mlpck" >"$tmp/log" 2>&1
"$tmp/cnn_float16" --data digits --eval-only --resume "$tmp/mlpck/mlp-step000002.ckpt" >"$tmp/log" 2>&1
if [ $? -eq 1 ] && grep -q "checkpoint $tmp/mlpck/mlp-step000002.ckpt does not match model digits_cnn" "$tmp/log"; then
    ok "another model's checkpoint is refused: $(grep -o 'it holds.*' "$tmp/log")"
else bad "another model's checkpoint"; fi

# 6. --check-numerics, flags
"$tmp/cnn_float16" --data digits --max-steps 10 --log-interval 0 --check-numerics \
    --inject-nan=fc1:7 >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "check-numerics: step 7 (epoch 0, batch 7), forward pass of the train step: the output of node 'fc1'" "$tmp/log"; then
    ok "--check-numerics names the node of an injected NaN: $(grep -o "node 'fc1'.*" "$tmp/log")"
else bad "--check-numerics (rc $rc)"; fi
"$tmp/cnn_off" --data digits --max-steps 10 --log-interval 0 --check-numerics >"$tmp/log" 2>&1
if [ $? -eq 0 ] && ! grep -q Numerics "$tmp/log"; then
    ok "--check-numerics is silent on a clean fp32 run"
else bad "--check-numerics on a clean run"; fi
flags_ok=1
for args in "--bogus" "--epochs=x" "--loss-scale=dynamic(init=0)" "--loss-scale=often" \
            "--inject-nan=fc1" "--inject-nan=nosuchnode:3" "--lr"; do
    "$tmp/cnn_off" --data digits --max-steps 0 $args >"$tmp/log" 2>&1
    [ $? -eq 2 ] || { flags_ok=0; echo "    $args: not exit 2"; }
done
[ $flags_ok -eq 1 ] && ok "unknown and malformed flags exit 2" || bad "flag errors"

# 7. Adam: learns; 2 epochs against 1 + resume 1, byte-identical
d=$tmp/adam; mkdir -p "$d"
adam="--optimizer adam(beta1=0.9,beta2=0.999,epsilon=1e-8,wd=1e-4) --lr cosine(base=0.005,final=0)"
"$tmp/cnn_float16" --data digits --epochs 2 --log-interval 10 --save-dir "$d/a" $adam >"$d/a.log" 2>&1 &&
"$tmp/cnn_float16" --data digits --epochs 2 --max-steps 46 --log-interval 10 --save-dir "$d/b" $adam >"$d/b1.log" 2>&1 &&
"$tmp/cnn_float16" --data digits --epochs 2 --log-interval 10 --save-dir "$d/b" $adam \
    --resume "$d/b/digits_cnn-0001.ckpt" >"$d/b2.log" 2>&1
rc=$?
cp "$d/a.log" "$tmp/log" 2>/dev/null
if [ $rc -eq 0 ] && cmp -s "$d/a/digits_cnn-0002.ckpt" "$d/b/digits_cnn-0002.ckpt" &&
   ! cmp -s "$d/a/digits_cnn-0001.ckpt" "$d/a/digits_cnn-0002.ckpt" &&
   diff <(strip "$d/a.log") <(cat "$d/b1.log" "$d/b2.log" | strip) >"$tmp/diff" &&
   ge "$(final "$d/a.log")" 0.90; then
    ok "adam (fp16, multi-precision): $(final "$d/a.log") after 2 epochs; 2 epochs and 1 + resume 1 give byte-identical checkpoints ($(stat -c %s "$d/a/digits_cnn-0002.ckpt") bytes: masters, mean, var, update count)"
else bad "adam resume (rc $rc, accuracy $(final "$d/a.log"))"; fi

# 8. + 9. schedules and --json-log, checked by Python's json module
cat >"$tmp/jcheck.py" <<'PY'
import json, math, struct, sys
def no_const(tok):
    raise ValueError("non-finite token " + tok)
need = {
    "start": ["model", "amp", "data", "train_samples", "validation_samples", "batch_size",
              "steps_per_epoch", "epochs", "optimizer", "lr", "loss_scale_mode", "loss_scale", "seed",
              "setup_ms", "device_setup_ms"],
    "speedometer": ["epoch", "batch_begin", "batch_end", "step", "samples_per_sec", "metrics", "lr",
                    "loss_scale"],
    "epoch": ["epoch", "batches", "step", "num_update", "train", "time_cost", "samples_per_sec", "lr",
              "loss_scale", "skipped_steps", "nonfinite_steps", "checkpoint", "validation"],
    "checkpoint": ["epoch", "file", "step", "num_update"],
    "skipped_step": ["epoch", "batch", "step", "loss_scale", "skipped_total"],
    "loss_scale": ["epoch", "batch", "step", "old", "new", "change"],
    "resume": ["file", "epoch", "batch", "step", "num_update", "loss_scale"],
    "end": ["steps", "num_update", "skipped_steps", "loss_scale", "validation"],
    "profile": ["steps", "step_ms", "phases_ms", "kinds_ms", "top_nodes", "call_timing", "calls"],
}
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
events = {}
mode, arg = sys.argv[1], sys.argv[2:]
for n, line in enumerate(open(arg[0], encoding="utf-8"), 1):
    e = json.loads(line, parse_constant=no_const)
    ev = e["event"]
    events.setdefault(ev, []).append(e)
    for k in need.get(ev, []) + ["time"]:
        if k not in e:
            sys.exit("line %d: %s event without %s" % (n, ev, k))
    if ev == "profile":
        # every call of the train step: name, op, pass, dtype, ms per step; the
        # device marks' times add up to the forward and backward phases
        for c in e["calls"]:
            if sorted(c) != ["dtype", "ms", "name", "op", "pass"] or c["pass"] not in ("forward", "backward") \
                    or not c["op"] or c["ms"] < 0:
                sys.exit("line %d: profile call %r" % (n, c))
        if e["call_timing"] == "device marks":
            fb = e["phases_ms"]["forward"] + e["phases_ms"]["backward"]
            if not e["calls"] or abs(sum(c["ms"] for c in e["calls"]) - fb) > 1e-6 * max(fb, 1):
                sys.exit("line %d: the calls' times do not add up to forward + backward" % n)
    for k in ("metrics", "train", "validation"):
        if k in e:
            for m in ("accuracy", "cross_entropy", "samples"):
                if m not in e[k]:
                    sys.exit("line %d: %s.%s missing" % (n, k, m))
    if ev == "speedometer" and mode in ("poly", "step"):
        t = e["step"]  # fp32, no skips: the update count of the last update
        # the settings are stored as fp32 (0.1f, 0.001f), the formula in double
        base, fin, mx = f32(0.1), f32(0.001), int(arg[1])
        if mode == "poly":
            want = fin + (base - fin) * (1 - t / mx) ** 2 if t <= mx else fin
        else:
            lr, count = base, 0
            while t > count + 20:
                count += 20; lr *= 0.5
            want = lr
        # the log writes the fp32 lr as the shortest decimal that reads back
        # as that float: equal as floats, bit for bit
        if f32(e["lr"]) != f32(want):
            sys.exit("step %d: lr %r, MXNet's formula %r" % (t, e["lr"], f32(want)))
for ev in arg[2:] if len(arg) > 2 else []:
    if ev not in events:
        sys.exit("no %s event (have %s)" % (ev, sorted(events)))
print(" ".join("%s:%d" % (k, len(v)) for k, v in sorted(events.items())))
PY
py=/usr/bin/python3
for sched in "poly:poly(base=0.1,power=2,final=0.001)" "step:step(base=0.1,factor=0.5,steps=20)"; do
    name=${sched%%:*}
    "$tmp/cnn_off" --data digits --epochs 2 --log-interval 3 --lr "${sched#*:}" --json-log "$tmp/$name.jsonl" >"$tmp/log" 2>&1
    if [ $? -eq 0 ] && out=$($py "$tmp/jcheck.py" $name "$tmp/$name.jsonl" 92 speedometer epoch end 2>&1); then
        ok "lr=${sched#*:}: the lr of every logged step is MXNet's formula ($out)"
    else bad "lr=${sched#*:} through the driver: $out"; fi
done
d=$tmp/json; mkdir -p "$d"
"$tmp/cnn_float16" --data digits --epochs 2 --log-interval 10 --save-dir "$d" --inject-inf-at-step 3 \
    --json-log "$d/a.jsonl" >"$tmp/log" 2>&1 &&
"$tmp/cnn_float16" --data digits --epochs 3 --log-interval 10 --save-dir "$d" --profile \
    --resume "$d/digits_cnn-0002.ckpt" --json-log "$d/b.jsonl" >>"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 0 ] && out=$($py "$tmp/jcheck.py" json "$d/a.jsonl" - start speedometer epoch checkpoint skipped_step loss_scale end 2>&1) &&
   out2=$($py "$tmp/jcheck.py" json "$d/b.jsonl" - start resume speedometer epoch checkpoint end profile 2>&1); then
    ok "--json-log: every line is JSON with its fields ($out; resumed: $out2)"
else bad "--json-log (rc $rc): $out $out2"; fi
# a NaN in the metrics becomes null: a forward NaN without --check-numerics
"$tmp/cnn_off" --data digits --max-steps 12 --log-interval 4 --inject-nan=fc2:5 --json-log "$d/nan.jsonl" >"$tmp/log" 2>&1
if $py "$tmp/jcheck.py" json "$d/nan.jsonl" - start end >/dev/null 2>&1 && grep -q '"cross_entropy":null' "$d/nan.jsonl"; then
    ok "--json-log writes null, not NaN, for non-finite numbers (a NaN in fc2 at step 5: cross_entropy null)"
else bad "--json-log with non-finite values"; fi

# strings escaped: a save directory with a quote, a backslash, a tab and UTF-8
wd="$d/we\"ird\\	dir é"
"$tmp/cnn_off" --data digits --max-steps 3 --log-interval 0 --save-dir "$wd" --json-log "$d/esc.jsonl" >"$tmp/log" 2>&1
if $py - "$d/esc.jsonl" "$wd/digits_cnn-step000003.ckpt" <<'PY' >/dev/null 2>&1
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
assert [e["file"] for e in ev if e["event"] == "checkpoint"] == [sys.argv[2]]
PY
then ok "--json-log escapes strings (a path with a quote, a backslash, a tab and UTF-8 reads back exactly)"
else bad "--json-log string escaping"; fi

# 10. --profile
"$tmp/cnn_float16" --data digits --max-steps 30 --log-interval 0 --profile >"$tmp/log" 2>&1
if [ $? -eq 0 ] && grep -q '^Profile: 29 train steps timed' "$tmp/log" &&
   awk '/^  phase/{p=1;next} p&&/%$/{s+=$NF+0;n++} /^  per node kind/{p=0} END{exit !(n==7 && s>97 && s<103)}' "$tmp/log" &&
   grep -Eq '^  conv +[0-9.]+ +[0-9.]+ ' "$tmp/log" && grep -Eq '^  conv_bn_relu[0-9]_conv[0-9]+_bwd +backward' "$tmp/log"; then
    ok "--profile: phases add up to the step ($(awk '/^  phase/{p=1;next} p&&/%$/{s+=$NF+0} /^  per node kind/{p=0} END{print s}' "$tmp/log")%), kinds and top nodes listed"
else bad "--profile"; fi

# 11. cifar10 on generated files
"$ampc" tests/e2e/models/cifar_tiny.sym --amp=off -o "$tmp/cifar_tiny" >"$tmp/log" 2>&1 || bad "compiling cifar_tiny"
mkdir -p "$tmp/cifar/cifar-10-batches-bin"
$py - "$tmp/cifar/cifar-10-batches-bin" <<'PY'
import os, sys
def write(name, n, off):
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        for k in range(n):
            lab = (k + off) % 10
            f.write(bytes([lab]) + b"".join(bytes([(lab * 20 + c * 7 + 5) % 256]) * 1024 for c in range(3)))
for i in range(1, 6):
    write("data_batch_%d.bin" % i, 40, i)
write("test_batch.bin", 30, 0)
PY
"$tmp/cifar_tiny" --data-dir "$tmp" --log-interval 0 --dump-state "$tmp/cifar.state" >"$tmp/log" 2>&1
rc=$?
cat >"$tmp/statecheck.py" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"AMPCSTAT"
ver, npar, batch, nval, seed, step, loss = struct.unpack_from("<IIqqQQd", b, 8)
at = 8 + struct.calcsize("<IIqqQQd")
for _ in range(npar):
    (ln,) = struct.unpack_from("<I", b, at); at += 4 + ln
    (n,) = struct.unpack_from("<q", b, at); at += 8 + 8 * n
x = struct.unpack_from("<%df" % nval, b, at); at += 4 * nval
y = struct.unpack_from("<%df" % batch, b, at)
mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0]
per = nval // batch
for j in range(batch):
    lab = int(y[j])
    for c in range(3):
        v = (lab * 20 + c * 7 + 5) % 256
        want = (f32(v / 255.0) - f32(mean[c])) / f32(std[c])
        for e in (0, 511, 1023):
            got = x[j * per + c * 1024 + e]
            assert abs(got - want) < 1e-5, (j, c, e, got, want)
print("%d samples x %d values" % (batch, per))
PY
if [ $rc -eq 0 ] && grep -q 'data cifar10: 200 training and 30 validation samples' "$tmp/log" &&
   out=$($py "$tmp/statecheck.py" "$tmp/cifar.state" 2>&1); then
    ok "cifar10 through the driver (the train block's cifar10(\"cifar\") under --data-dir): 200/30 samples, every value (x/255 - mean[c])/std[c] ($out)"
else bad "cifar10 through the driver (rc $rc): $out"; fi
"$tmp/cifar_tiny" --data "cifar10(\"$tmp/cifar\")" --augment crop=4,mirror --epochs 2 --log-interval 0 >"$tmp/log" 2>&1
if [ $? -eq 0 ] && grep -q '^Augment: training images, zero padding by 4 then a random crop, a random horizontal mirror' "$tmp/log"; then
    ok "--augment crop=4,mirror on cifar10"
else bad "--augment on cifar10"; fi
"$tmp/cnn_off" --data digits --max-steps 1 --random-mirror >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q 'the digits data are never augmented' "$tmp/log" &&
   "$tmp/cnn_off" --data digits --max-steps 1 --log-interval 0 >"$tmp/log" 2>&1 && ! grep -q '^Augment' "$tmp/log"; then
    ok "augmentation is off by default and refused for digits (exit 2)"
else bad "augmentation for digits (rc $rc)"; fi


# ---- 12. the train block's settings reach the program (runtime/settings.c) ----
if "$ampc" tests/golden/driver/train_settings_all.sym -o "$tmp/all" >"$tmp/log" 2>&1 &&
    "$tmp/all" >"$tmp/log" 2>&1 &&
    grep -q "batch 16, 640 steps per epoch" "$tmp/log" &&
    grep -q "Loss scale: dynamic, init 1024, growth 2, backoff 0.5, interval 100" "$tmp/log" &&
    grep -q "Augment: training images, zero padding by 2 then a random crop, a random horizontal mirror" "$tmp/log" &&
    [ "$(grep -c '^Epoch\[[0-9]*\] Validation-accuracy' "$tmp/log")" = 1 ] &&
    "$tmp/all" --batch-size 8 --augment off >"$tmp/log" 2>&1 &&
    grep -q "batch 8, 1280 steps per epoch" "$tmp/log" && ! grep -q "^Augment" "$tmp/log"; then
    ok "every train-block key reaches the program (max_steps=100 of epochs=2: one validation), flags override them"
else
    bad "the train block's settings in the program"
fi

echo "training: $pass passed, $fail failed ($(( $(date +%s) - start )) s)"
[ "$fail" -eq 0 ]
