#!/bin/bash
# newcomer.sh - a new user's first hour, from the README alone (issue 28).
#
# In a scratch HOME, with a copy of the tree (its sources and what make
# built, timestamps kept) as the checkout:
#   1. the README's "Your first model": its model file (a small CNN written
#      from docs/ops.md) and its commands, run verbatim from the checkout:
#      checked, compiled, trained with a checkpoint per epoch, resumed,
#      predicted from, its --version;
#   2. the README's install commands, verbatim (make install PREFIX=$HOME/ampc);
#   3. the checkout deleted, the installed ampc compiles the model again, and
#      its program trains on the installed data, resumes the checkpoint of
#      step 1, predicts and says its version without the paths it was
#      built in; im2rec and the op reference are there.
# usage: newcomer.sh BUILD  (BUILD: the built tree's build folder)
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: newcomer.sh BUILD}" && pwd)
t0=$(date +%s)
scratch=$(mktemp -d /tmp/ampc_newcomer.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
pass=0 fail=0
ok() { pass=$((pass+1)); echo "PASS newcomer.sh: $1"; }
bad() { fail=$((fail+1)); echo "FAIL newcomer.sh: $1"; [ -f "$scratch/log" ] && tail -15 "$scratch/log" | sed 's/^/    /'; }

export HOME=$scratch/home
mkdir -p "$HOME"
unset AMPC_DATA_DIR AMPC_RUNTIME_DIR CFLAGS

# ---- the checkout: a copy of the tree (sources, and the build, as make left it) ----
src=$scratch/checkout
mkdir -p "$src/build"
(cd "$here" && git ls-files -z --cached --others --exclude-standard) |
    (cd "$here" && xargs -0 cp -p --parents -t "$src") || { bad "copying the tree"; exit 1; }
for f in obj gen cuda data ampc im2rec libampc.a libampcrt.a ampcmpi.o libampccuda.a; do
    [ -e "$build/$f" ] && cp -a "$build/$f" "$src/build/"
done

# ---- the README's blocks: "Your first model" and the install ----------------------
python3 - "$here/README.md" "$scratch" <<'PY' || { bad "reading the README's first-model section"; exit 1; }
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
sec = re.search(r"^## Your first model\n(.*?)^## ", text, re.S | re.M).group(1)
blocks = re.findall(r"^```(\w*)\n(.*?)^```", sec, re.S | re.M)
sym = [b for lang, b in blocks if lang == "sym"]
sh = [b for lang, b in blocks if lang == "sh"]
assert len(sym) == 1 and sym[0].startswith("# mycnn.sym") and len(sh) == 2, blocks
open(sys.argv[2] + "/mycnn.sym", "w").write(sym[0])
open(sys.argv[2] + "/first.sh", "w").write(sh[0])
open(sys.argv[2] + "/install.sh", "w").write(sh[1])
PY
ok "the README's first model: a model file and $(grep -vc '^\s*\(#\|$\)' "$scratch/first.sh") commands, then $(grep -vc '^\s*\(#\|$\)' "$scratch/install.sh") to install"

# ---- 1. the first model, verbatim, in the checkout -----------------------------------
cp "$scratch/mycnn.sym" "$src/mycnn.sym"
if (cd "$src" && bash -e "$scratch/first.sh") >"$scratch/log" 2>&1; then
    ok "the README's first-model commands run as written ($(grep -c '^Final validation' "$scratch/log") trainings)"
else bad "the README's first-model commands"; fi
acc=$(grep '^Final validation-accuracy=' "$scratch/log" | tail -1 | cut -d= -f2)
if [ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' &&
   [ -f "$src/run1/mycnn-0004.ckpt" ] && [ -f "$src/run1/mycnn-0008.ckpt" ] && [ -s "$src/y.npy" ] &&
   grep -q "^Resumed from \"run1/mycnn-0004.ckpt\"" "$scratch/log" &&
   grep -q "^Predicted 4 samples of x.npy" "$scratch/log"; then
    ok "trained to $acc, a checkpoint per epoch, resumed from epoch 4, predicted"
else bad "the first model's run (accuracy '$acc')"; fi
if grep -q "^mycnn: model mycnn (sha256 $(sha256sum <"$scratch/mycnn.sym" | cut -c1-64)), compiled by ampc [0-9.]*$" "$scratch/log" &&
   grep -q "^built with: ampc mycnn.sym -o mycnn$" "$scratch/log" &&
   grep -q "^runtime: ampc [0-9.]*" "$scratch/log"; then
    ok "./mycnn --version: the model file's sha256, how ampc built it, the runtime's version"
else bad "./mycnn --version"; fi

# ---- 2. the install, verbatim, from the checkout -----------------------------------------
if (cd "$src" && bash -e "$scratch/install.sh") >"$scratch/log" 2>&1 &&
   [ -x "$HOME/ampc/bin/ampc" ] && [ -x "$HOME/ampc/bin/im2rec" ] &&
   [ -s "$HOME/ampc/share/ampc/data/digits.csv.gz" ]; then
    ok "make install PREFIX=\$HOME/ampc: ampc, im2rec, the runtime and the data"
else bad "the README's install commands"; fi

# ---- 3. the checkout gone: the installed ampc alone ----------------------------------------
work=$HOME/models
mkdir -p "$work"
cp -r "$src/mycnn.sym" "$src/run1" "$src/x.npy" "$work/"
rm -rf "$src"
export PATH=$HOME/ampc/bin:$PATH
cd "$work" || exit 1
if [ "$(command -v ampc)" = "$HOME/ampc/bin/ampc" ] && ampc --version >"$scratch/log" 2>&1 &&
   grep -q '^ampc [0-9.]*' "$scratch/log"; then
    ok "the installed ampc is on PATH: $(cat "$scratch/log")"
else bad "the installed ampc on PATH"; fi
if ampc mycnn.sym -o mycnn >"$scratch/log" 2>&1 &&
   ./mycnn --epochs 1 --save-dir run2 --log-interval 0 >"$scratch/log" 2>&1 &&
   grep -q "^Final validation-accuracy=" "$scratch/log" && [ -f run2/mycnn-0001.ckpt ]; then
    ok "with the checkout deleted, the installed ampc builds the model and its program trains on the installed data"
else bad "the installed ampc and runtime without the checkout"; fi
if ./mycnn --resume run1/mycnn-0008.ckpt --predict x.npy --output y2.npy >"$scratch/log" 2>&1 &&
   [ -s y2.npy ]; then
    ok "the installed program predicts from the first run's checkpoint"
else bad "--resume --predict with the installed program"; fi
./mycnn --version >"$scratch/log" 2>&1
if grep -q "^built with: ampc mycnn.sym -o mycnn$" "$scratch/log" && ! grep -q "$scratch" "$scratch/log"; then
    ok "its --version names no path it was built in"
else bad "the installed program's --version"; fi
ampc "$work/mycnn.sym" -o "$work/abs" >"$scratch/log" 2>&1 && "$work/abs" --version >"$scratch/log" 2>&1
if grep -q "^built with: ampc mycnn.sym -o abs$" "$scratch/log"; then
    ok "absolute paths on ampc's command line are reduced to file names in --version"
else bad "absolute paths in --version"; fi
if im2rec >"$scratch/log" 2>&1; [ $? = 2 ] && grep -q "^usage: im2rec" "$scratch/log" &&
   ampc --describe-op=Convolution | grep -q '^### Convolution$'; then
    ok "im2rec and the op reference (ampc --describe-op) are installed"
else bad "im2rec or --describe-op after the install"; fi

echo "newcomer.sh: $pass passed, $fail failed ($(( $(date +%s) - t0 )) s)"
[ $fail = 0 ]
