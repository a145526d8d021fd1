#!/usr/bin/env bash
# A model without a loss head compiles to a program that only predicts
# (autodiff_predict; docs/codegen.md, "Programs that only predict"), and it
# predicts what the same network with a loss head does.  tests/e2e/models/
# predict_pair.sym spells digits_cnn's network twice: `headed` trains a few
# steps on digits and saves its parameters (--save-params); `headless` loads
# them (--load-params) and predicts logits on the same inputs as `headed`
# predicts probabilities; softmax(logits) must equal the probabilities
# (fp32: to 1e-6; AMP: the two programs round the same 16-bit values, so to
# 1e-6 as well once both read the saved fp32 masters).  Also: the headless
# program refuses to train, saying why; a headless model with two outputs is
# refused at compile time.
# usage: predict.sh AMPC DATA_DIR
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$2
. "$(dirname "$0")/lib.sh"
export AMPC_DATA_DIR=$data
model=tests/e2e/models/predict_pair.sym

# 7 samples of 1x8x8 as a float32 .npy (NumPy's v1.0 header, no NumPy needed)
python3 - "$tmp/x.npy" <<'PY'
import struct, sys, random
rng = random.Random(3)
n = 7 * 64
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (7, 1, 8, 8), }"
header += " " * (63 - (10 + len(header)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%df" % n, *[rng.uniform(0, 16) for _ in range(n)]))
PY

# softmax(logits.npy) against probs.npy, max abs difference <= tol
compare() {
    python3 - "$1" "$2" "$3" <<'PY'
import ast, math, struct, sys
def load(path):
    b = open(path, "rb").read()
    assert b[:6] == b"\x93NUMPY", path
    hl = struct.unpack("<H", b[8:10])[0] if b[6] == 1 else struct.unpack("<I", b[8:12])[0]
    off = 10 if b[6] == 1 else 12
    h = ast.literal_eval(b[off:off + hl].decode())
    assert h["descr"] == "<f4" and not h["fortran_order"], h
    n = 1
    for d in h["shape"]:
        n *= d
    return h["shape"], struct.unpack("<%df" % n, b[off + hl:off + hl + 4 * n])
(ls, logits), (ps, probs) = load(sys.argv[1]), load(sys.argv[2])
assert ls == ps == (7, 10), (ls, ps)
worst = 0.0
for i in range(7):
    row = logits[10 * i:10 * i + 10]
    m = max(row)
    e = [math.exp(v - m) for v in row]
    s = sum(e)
    worst = max(worst, max(abs(e[k] / s - probs[10 * i + k]) for k in range(10)))
print("max |softmax(logits) - probs| = %.3g" % worst)
sys.exit(0 if worst <= float(sys.argv[3]) else 1)
PY
}

for amp in off float16 bfloat16; do
    what="headless predicts softmax-equal to headed (--amp=$amp)"
    rm -f "$tmp/log"
    if ! "$ampc" "$model" --model=headed --amp="$amp" -o "$tmp/headed" >"$tmp/log" 2>&1 ||
       ! "$ampc" "$model" --model=headless --amp="$amp" -o "$tmp/headless" >>"$tmp/log" 2>&1; then
        bad "$what (compile)"; continue
    fi
    if ! "$tmp/headed" --data digits --max-steps 5 --log-interval 0 \
            --save-params "$tmp/p.params" >"$tmp/log" 2>&1 ||
       ! "$tmp/headed" --load-params "$tmp/p.params" --predict "$tmp/x.npy" \
            --output "$tmp/probs.npy" >>"$tmp/log" 2>&1 ||
       ! "$tmp/headless" --load-params "$tmp/p.params" --predict "$tmp/x.npy" \
            --output "$tmp/logits.npy" >>"$tmp/log" 2>&1; then
        bad "$what (run)"; continue
    fi
    if compare "$tmp/logits.npy" "$tmp/probs.npy" 1e-6 >>"$tmp/log" 2>&1; then
        ok "$what: $(tail -1 "$tmp/log")"
    else
        bad "$what"
    fi
done

what="the headless program refuses to train, naming --predict"
"$tmp/headless" --data digits --max-steps 1 >"$tmp/log" 2>&1
rc=$?
if [ "$rc" = 2 ] && grep -q "has no train step.*--predict" "$tmp/log"; then ok "$what"; else bad "$what (rc $rc)"; fi

what="a headless model with two outputs is refused at compile time"
cat >"$tmp/two.sym" <<'SYM'
model two(data: float32[N,4]) {
    h = FullyConnected(data, num_hidden=3, name="a")
    return (h, FullyConnected(data, num_hidden=2, name="b"))
}
SYM
"$ampc" "$tmp/two.sym" -o "$tmp/two" >"$tmp/log" 2>&1
rc=$?
if [ "$rc" = 1 ] && grep -q "has no loss head and 2 outputs" "$tmp/log" && [ ! -e "$tmp/two" ]; then
    ok "$what"
else
    bad "$what (rc $rc)"
fi

echo "predict: $pass passed, $fail failed"
[ "$fail" = 0 ]
