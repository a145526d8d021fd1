#!/usr/bin/env bash
# mpi_check.sh - the ranks' start-up check (docs/kvstore.md, "The start-up
# check"; runtime/rankcheck.c), end to end: one 2-rank mpirun per field,
# where only that field differs between rank 0 and rank 1 (mpirun's MPMD form,
# `-np 1 A ARGS : -np 1 B ARGS2`).  Each must stop both ranks before the first
# collective with exit status 2 and exactly one message, naming rank 1, the
# field and both values; no crash, no MPI_Abort.  The fields a flag or a build
# can change alone are here; the rest (the world size, the batch per rank,
# the sample shape, the classes, the steps per epoch, the amp) cannot differ
# alone under one mpirun and are covered by tests/runtime/test_rankcheck.c.
# Also: identical ranks train (exit 0), and a rank that never arrives at the
# check (--inject-stop-at-start) is named within --mpi-timeout.  And the MPI
# link decision: `ampc examples/mlp.sym --machines=2` (auto chooses dist_sync)
# and a train block's `kvstore = dist_sync` link MPI and train as 2 ranks
# (--kvstore=local overrides the key: no MPI); a program without MPI under
# mpirun -np 2 stops (exit 2) unless --independent-runs.
# A tiny model (one FullyConnected on 64 inputs) and synthetic data keep each
# run to about half a second.
# usage: mpi_check.sh AMPC DATA_DIR
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
E2E_LOG_LINES=8
. "$(dirname "$0")/lib.sh"
start=$(date +%s)

if ! command -v mpirun >/dev/null || [ ! -f "$(dirname "$ampc")/ampcmpi.o" ]; then
    echo "FAIL mpi_check.sh: mpirun or $(dirname "$ampc")/ampcmpi.o missing (make deps; make)"
    exit 1
fi
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export AMPC_DATA_DIR="$data" OMPI_MCA_rmaps_base_oversubscribe=1
# odls_base_sigkill_timeout 0: mpirun otherwise waits a second before it
# reaps a job whose ranks exited non-zero
MPIRUN=(timeout 60 mpirun --oversubscribe --bind-to none --mca btl self,vader
        --mca btl_vader_single_copy_mechanism none --mca odls_base_sigkill_timeout 0)
base=(--data synthetic --batch-size 8 --epochs 1 --max-steps 2 --log-interval 0 --threads 1)

model() { # FILE NAME LR_MULT
    printf 'model %s(data: float32[N,64], softmax_label: float32[N]) {\n    return SoftmaxOutput(FullyConnected(data, num_hidden=10, weight=param(lr_mult=%s)), softmax_label)\n}\n' \
        "$2" "$3" >"$1"
}
model "$tmp/tiny.sym" tiny 1
model "$tmp/mult.sym" tiny 2
model "$tmp/other.sym" other 1
build() { # OUT SYM FLAGS...
    local out=$1 sym=$2
    shift 2
    "$ampc" "$sym" "$@" -o "$out" >"$tmp/log" 2>&1 || bad "ampc $sym $* -o $(basename "$out")"
}
build "$tmp/A" "$tmp/tiny.sym" --mpi
build "$tmp/mult" "$tmp/mult.sym" --mpi
build "$tmp/other" "$tmp/other.sym" --mpi
build "$tmp/fp16" "$tmp/tiny.sym" --mpi --amp=float16
build "$tmp/nomemplan" "$tmp/tiny.sym" --mpi --no-memplan
build "$tmp/kv" "$tmp/tiny.sym" --kvstore=dist_sync --machines=2
build "$tmp/kv16" "$tmp/tiny.sym" --kvstore=dist_sync --machines=2 --kv-wire=f16

# differs NAME WANT PROG0 ARGS0... -- PROG1 ARGS1...: 2 ranks, exit 2, one message
differs() {
    local name=$1 want=$2
    shift 2
    local a=() b=()
    while [ "$1" != -- ]; do a+=("$1"); shift; done
    shift
    b=("$@")
    "${MPIRUN[@]}" -np 1 "${a[@]}" : -np 1 "${b[@]}" >"$tmp/log" 2>&1
    local rc=$? n
    n=$(grep -c "the ranks do not run the same training" "$tmp/log")
    if [ $rc = 2 ] && [ "$n" = 1 ] && grep -qF -- "rank 1's $want" "$tmp/log" &&
       ! grep -qiE "segmentation|MPI_ABORT|signal" "$tmp/log"; then
        ok "$name: $(grep -o "rank 1's .* where rank 0's is [^;]*" "$tmp/log" | cut -c1-150)"
    else
        bad "$name (exit $rc, $n messages; wanted \"rank 1's $want\")"
    fi
}
A=("$tmp/A" "${base[@]}")

# identical ranks pass the check and train
if "${MPIRUN[@]}" -np 2 "${A[@]}" >"$tmp/log" 2>&1 && grep -q '^MPI: 2 ranks' "$tmp/log" &&
   ! grep -q "do not run the same" "$tmp/log"; then
    ok "identical ranks pass the start-up check and train"
else bad "identical ranks"; fi

# ---- the program ----
differs "model" "model is other where rank 0's is tiny" "${A[@]}" -- "$tmp/other" "${base[@]}"
differs "parameters" "parameters is 2 tensors #" "${A[@]}" -- "$tmp/fp16" "${base[@]}"
differs "lr/wd multipliers" "lr/wd multipliers is #" "${A[@]}" -- "$tmp/mult" "${base[@]}"
differs "kvstore buckets" "kvstore buckets is dist_sync, 1 buckets #" "${A[@]}" -- "$tmp/kv" "${base[@]}"
differs "kv wire" "kv wire is float16 where rank 0's is float32" "$tmp/kv" "${base[@]}" -- "$tmp/kv16" "${base[@]}"
differs "build id" "build id is " "${A[@]}" -- "$tmp/nomemplan" "${base[@]}"
# ---- the run ----
differs "global batch" "global batch is 32 where rank 0's is 16" "${A[@]}" -- "${A[@]}" --batch-size 16
differs "loss scale" "loss scale is static(128) where rank 0's is off" "${A[@]}" -- "${A[@]}" --loss-scale 128
differs "optimizer" "optimizer is adam(beta1=0.9, beta2=0.999, epsilon=1e-08, clip_gradient=off) where rank 0's is sgd(clip_gradient=off)" \
    "${A[@]}" -- "${A[@]}" --optimizer adam
differs "lr" "lr is 0.5 where rank 0's is 0.01" "${A[@]}" -- "${A[@]}" --lr 0.5
differs "lr schedule" "lr schedule is cosine(final=0, max_update=0) where rank 0's is constant" \
    "${A[@]}" -- "${A[@]}" --lr 'cosine(base=0.01, final=0)'
differs "momentum" "momentum is 0.5 where rank 0's is 0.9" "${A[@]}" -- "${A[@]}" --momentum 0.5
differs "wd" "wd is 0.001 where rank 0's is 0.0001" "${A[@]}" -- "${A[@]}" --wd 0.001
differs "seed" "seed is 7 where rank 0's is 42" "${A[@]}" -- "${A[@]}" --seed 7
differs "data source" "data source is digits where rank 0's is synthetic" "${A[@]}" -- "${A[@]}" --data digits
mkdir -p "$tmp/few" && zcat "$data/digits.csv.gz" | head -1000 | gzip >"$tmp/few/digits.csv.gz"
differs "samples per epoch" "samples per epoch is " "${A[@]}" --data digits -- "${A[@]}" --data digits --data-dir "$tmp/few"
differs "epochs" "epochs is 3 where rank 0's is 1" "${A[@]}" -- "${A[@]}" --epochs 3
differs "max steps" "max steps is 3 where rank 0's is 2" "${A[@]}" -- "${A[@]}" --max-steps 3
differs "--mpi-bucket-mb" "--mpi-bucket-mb is 1 where rank 0's is 4" "${A[@]}" -- "${A[@]}" --mpi-bucket-mb 1
# ---- resuming: checkpoints written by the program alone (one rank) ----
"$tmp/A" "${base[@]}" --save-dir "$tmp/c1" >"$tmp/log" 2>&1 &&
    "$tmp/A" "${base[@]}" --lr 0.5 --save-dir "$tmp/c2" >"$tmp/log" 2>&1 &&
    "$tmp/fp16" "${base[@]}" --loss-scale 'dynamic(init=1024)' --save-dir "$tmp/s1" >"$tmp/log" 2>&1 &&
    "$tmp/fp16" "${base[@]}" --loss-scale 'dynamic(init=2048)' --save-dir "$tmp/s2" >"$tmp/log" 2>&1 ||
    bad "writing the checkpoints"
c1=$tmp/c1/tiny-step000002.ckpt c2=$tmp/c2/tiny-step000002.ckpt
differs "resume step" "resume step is none (not resuming) where rank 0's is 2" \
    "${A[@]}" --epochs 2 --resume "$c1" -- "${A[@]}" --epochs 2
differs "resume parameters" "resume parameters is 2 tensors #" \
    "${A[@]}" --epochs 2 --resume "$c1" -- "${A[@]}" --epochs 2 --resume "$c2"
differs "resume loss scale" "resume loss scale is 2048 (2 clean steps) where rank 0's is 1024" \
    "$tmp/fp16" "${base[@]}" --epochs 2 --resume "$tmp/s1/tiny-step000002.ckpt" -- \
    "$tmp/fp16" "${base[@]}" --epochs 2 --resume "$tmp/s2/tiny-step000002.ckpt"

# ---- a rank that never arrives ----
"${MPIRUN[@]}" -np 2 "${A[@]}" --mpi-timeout 1 --inject-stop-at-start --inject-rank 1 >"$tmp/log" 2>&1
rc=$?
if [ $rc != 0 ] && [ $rc != 124 ] &&
   grep -q "rank 0: error: rank 1 did not arrive at the start-up check within --mpi-timeout=1 s" "$tmp/log"; then
    ok "a rank that never arrives at the check is named within --mpi-timeout (exit $rc)"
else bad "a rank that never arrives (exit $rc)"; fi

# ---- the MPI link follows the placement; a program without MPI under mpirun ----
# auto's choice of dist_sync for 2 machines, and the train block's kvstore key,
# link MPI as --mpi does: under mpirun -np 2 the ranks reduce together
printf 'model tiny(data: float32[N,64], softmax_label: float32[N]) {\n    return SoftmaxOutput(FullyConnected(data, num_hidden=10), softmax_label)\n}\ntrain tiny {\n    kvstore = dist_sync\n}\n' >"$tmp/keyed.sym"
build "$tmp/m2" examples/mlp.sym --machines=2
build "$tmp/keyed" "$tmp/keyed.sym"
build "$tmp/keyed_local" "$tmp/keyed.sym" --kvstore=local
for p in m2 keyed; do
    if ldd "$tmp/$p" | grep -q libmpi && "${MPIRUN[@]}" -np 2 "$tmp/$p" "${base[@]}" >"$tmp/log" 2>&1 &&
       grep -q '^MPI: 2 ranks' "$tmp/log"; then
        ok "$p links MPI from its placement (dist_sync) and trains as 2 ranks"
    else bad "$p: MPI not linked, or not 2 ranks under mpirun"; fi
done
ldd "$tmp/keyed_local" | grep -q libmpi && bad "--kvstore=local over the train block's dist_sync still links MPI" ||
    ok "--kvstore=local overrides the train block's kvstore: no MPI"
# the program without MPI under a real mpirun: stopped with the message; as
# --independent-runs copies with their own save directories, both run
build "$tmp/one" "$tmp/tiny.sym"
"${MPIRUN[@]}" -np 2 "$tmp/one" "${base[@]}" >"$tmp/log" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "started as one of 2 processes (OMPI_COMM_WORLD_SIZE=2), but this program was built without MPI" "$tmp/log"; then
    ok "a program without MPI under mpirun -np 2 stops with exit 2 and the message"
else bad "a program without MPI under mpirun -np 2 (exit $rc)"; fi
if "${MPIRUN[@]}" -np 1 "$tmp/one" "${base[@]}" --independent-runs --save-dir "$tmp/i0" : \
        -np 1 "$tmp/one" "${base[@]}" --independent-runs --save-dir "$tmp/i1" >"$tmp/log" 2>&1 &&
   [ -s "$tmp/i0/tiny-step000002.ckpt" ] && [ -s "$tmp/i1/tiny-step000002.ckpt" ]; then
    ok "--independent-runs under mpirun: two copies, each its own save directory"
else bad "--independent-runs under mpirun"; fi

echo "mpi_check: $pass passed, $fail failed ($(( $(date +%s) - start )) s)"
[ $fail -eq 0 ]
