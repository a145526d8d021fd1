#!/usr/bin/env bash
# mpi.sh - data-parallel training on several processes (docs/kvstore.md,
# "Running on several processes"), end to end under mpirun -np 2 on the CPU:
#   1. digits_cnn built with ampc --mpi, fp32 and AMP (float16, dynamic loss
#      scale), batch 16 per rank on digits, whose training set is not a
#      multiple of 2 x 16: both ranks end with the same trainable parameters
#      and optimizer state, crc for crc (BatchNorm moving statistics are per
#      rank and differ); the last samples of each epoch are dropped (logged);
#      --mpi-bucket-mb 0.01 (tensors cut across 15 buckets) gives the same bits;
#   2. against one process at the same global batch with per-rank BatchNorm
#      (--sim-ranks 2: the two ranks' batches in turn, gradients summed as MPI
#      sums them): the checkpoint is byte for byte rank 1's (its moving
#      statistics are the last micro-batch's), so the trainable parameters
#      and optimizer state are rank 0's too, fp32 and AMP; and against one
#      process at batch 32 with BatchNorm over all 32 (a different
#      computation): the validation accuracy within 0.05;
#      the same with recordio(...) (a source that decodes ahead) on 200 Fashion-MNIST
#      images, when im2rec and rio_tool are built (else a SKIPPED line);
#      the reduction overlaps backward (AMPC_MPI_DEBUG=1: every bucket starts
#      before the train step returns), and a program built with
#      --kvstore=dist_sync reduces in the kvstore pass's buckets (its
#      --dump=program kvbucket lines), bit for bit --sim-ranks 2's;
#   3. an overflow on rank 1 only (--inject-inf-at-step 20 --inject-rank 1)
#      skips step 20 on both ranks: one more skipped step and one update
#      fewer than the same run without it, on rank 0 too; --sim-ranks 2 with
#      the same injection writes rank 1's checkpoint byte for byte;
#   4. rank 1 stopped (SIGSTOP) mid-run: rank 0 exits non-zero within
#      --mpi-timeout (3 s) plus start-up slack, naming rank 1;
#   5. a checkpoint written by 2 ranks resumes in one process (global batch
#      32) and in mpirun -np 1;
#   6. a program built without --mpi links no MPI library.
# mpirun runs under timeout with the flags a container needs; stderr is never
# required to be empty (hwloc warns in containers).
# usage: mpi.sh AMPC DATA_DIR
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
pass=0 fail=0
ok() { pass=$((pass+1)); echo "PASS $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; [ -f "$tmp/log" ] && tail -20 "$tmp/log" | sed 's/^/    /'; }

if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
    echo "FAIL mpi.sh: Open MPI is not installed (mpirun, mpicc): run make deps-test (tools/deps-test.txt:"
    echo "     openmpi-bin, libopenmpi-dev)"
    exit 1
fi
if [ ! -f "$(dirname "$ampc")/ampcmpi.o" ]; then
    echo "FAIL mpi.sh: $(dirname "$ampc")/ampcmpi.o was not built (make builds it where mpicc is)"
    exit 1
fi
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export AMPC_DATA_DIR="$data" OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --oversubscribe --bind-to none --mca btl self,vader
        --mca btl_vader_single_copy_mechanism none)
common=(--data digits --batch-size 16 --log-interval 0 --threads 1)

# with $CC and $CFLAGS, as ampc builds the programs (a sanitizer build's runtime needs them)
# shellcheck disable=SC2086
${CC:-cc} ${CFLAGS:-} -std=c11 -Wall -Wextra -Werror -Iruntime tests/e2e/ckpt_tool.c \
    "$(dirname "$ampc")/libampcrt.a" -lopenblas -lz -lm -o "$tmp/ckpt_tool" >"$tmp/log" 2>&1 ||
    { bad "building tests/e2e/ckpt_tool.c"; exit 1; }
ck=$tmp/ckpt_tool
# the trainable parameters and their optimizer state (moving statistics: per rank)
trainable() { "$ck" show "$1" | grep '^param' | grep -v '_moving_'; }
field() { "$ck" show "$1" | awk -v k="$2" '$1 == k { print $2 }'; }

for amp in off float16; do
    "$ampc" examples/digits_cnn.sym --amp=$amp --mpi -o "$tmp/d_$amp" >"$tmp/log" 2>&1 ||
        bad "ampc --mpi --amp=$amp"
done
"$ampc" examples/digits_cnn.sym --amp=off -o "$tmp/d_one" >"$tmp/log" 2>&1 || bad "ampc (no --mpi)"

# ---- 1. two ranks: the same parameters and optimizer state -------------------------
for amp in off float16; do
    d=$tmp/ck_$amp
    if ! timeout 120 "${MPIRUN[@]}" -np 2 "$tmp/d_$amp" "${common[@]}" --epochs 2 \
            --save-dir "$d" --save-all-ranks >"$tmp/log" 2>&1; then
        bad "amp=$amp: mpirun -np 2 training"
        continue
    fi
    cp "$tmp/log" "$tmp/log_$amp"
    grep -q '^MPI: 2 ranks, batch 16 per rank (32 per step)' "$tmp/log" ||
        bad "amp=$amp: no MPI line in rank 0's log"
    dropped=$(sed -n 's/.*(the last \([0-9]*\) samples.*/\1/p' "$tmp/log")
    [ "${dropped:-0}" -gt 0 ] && ok "amp=$amp: the training set is not a multiple of 2 x 16 ($dropped dropped per epoch)" ||
        bad "amp=$amp: expected a remainder to drop, got '${dropped:-}'"
    [ "$(grep -c 'Saved checkpoint' "$tmp/log")" = 2 ] ||
        bad "amp=$amp: rank 0 should log 2 checkpoints (only rank 0 logs)"
    f0=$d/digits_cnn-0002.ckpt f1=$d/rank1/digits_cnn-0002.ckpt
    if [ -f "$f0" ] && [ -f "$f1" ] && [ -n "$(trainable "$f0")" ] &&
            [ "$(trainable "$f0")" = "$(trainable "$f1")" ]; then
        ok "amp=$amp: both ranks end with the same parameters and optimizer state"
    else
        bad "amp=$amp: the ranks' parameters or optimizer state differ"
        diff <(trainable "$f0") <(trainable "$f1") | head -5 | sed 's/^/    /'
    fi
    [ "$(field "$f0" step)" = "$(field "$f1" step)" ] && [ "$(field "$f0" num_update)" = "$(field "$f1" num_update)" ] ||
        bad "amp=$amp: the ranks ran different steps"
    if [ "$("$ck" show "$f0" | grep _moving_)" != "$("$ck" show "$f1" | grep _moving_)" ]; then
        ok "amp=$amp: the BatchNorm moving statistics are per rank"
    else
        bad "amp=$amp: the moving statistics are equal: do the ranks read the same shard?"
    fi
done

# the buckets cut tensors anywhere (0.01 MiB: 2,621 values, 15 buckets here): the sums
# are per element, so the same bits as one 4 MiB bucket
if timeout 120 "${MPIRUN[@]}" -np 2 "$tmp/d_off" "${common[@]}" --epochs 2 --mpi-bucket-mb 0.01 \
        --save-dir "$tmp/ck_small" --save-all-ranks >"$tmp/log" 2>&1 &&
        cmp -s "$tmp/ck_small/digits_cnn-0002.ckpt" "$tmp/ck_off/digits_cnn-0002.ckpt" &&
        cmp -s "$tmp/ck_small/rank1/digits_cnn-0002.ckpt" "$tmp/ck_off/rank1/digits_cnn-0002.ckpt"; then
    ok "--mpi-bucket-mb 0.01 (15 buckets) trains to the same bits as one bucket"
else
    bad "--mpi-bucket-mb 0.01 and the default bucket differ"
fi

# ---- 2. against one process at the same global batch -------------------------------
for amp in off float16; do
    "$ampc" examples/digits_cnn.sym --amp=$amp -o "$tmp/one_$amp" >"$tmp/log" 2>&1 ||
        { bad "ampc --amp=$amp (no --mpi)"; continue; }
    if timeout 120 "$tmp/one_$amp" "${common[@]}" --epochs 2 --sim-ranks 2 --save-dir "$tmp/sim_$amp" \
            >"$tmp/log" 2>&1 &&
            cmp -s "$tmp/sim_$amp/digits_cnn-0002.ckpt" "$tmp/ck_$amp/rank1/digits_cnn-0002.ckpt" &&
            [ "$(trainable "$tmp/sim_$amp/digits_cnn-0002.ckpt")" = "$(trainable "$tmp/ck_$amp/digits_cnn-0002.ckpt")" ]; then
        ok "amp=$amp: mpirun -np 2 equals one process with --sim-ranks 2 bit for bit"
    else
        bad "amp=$amp: mpirun -np 2 and one process with --sim-ranks 2 differ"
    fi
done

# ---- 2b. the reduction overlaps backward; the program's kvstore buckets --------------
# The train step announces each gradient right after the call that completes it
# (RtCtx.grad_ready); AMPC_MPI_DEBUG=1 makes rank 0 print, after the first step, the
# buckets (gradient buffers in the order packed) and how many it started before the
# train step returned.  Own rule (--mpi-bucket-mb 0.01: 15 buckets): all 15 start
# during backward (the engine before this started none there).
if timeout 120 env AMPC_MPI_DEBUG=1 "${MPIRUN[@]}" -np 2 "$tmp/d_float16" "${common[@]}" \
        --epochs 1 --max-steps 3 --mpi-bucket-mb 0.01 >"$tmp/log" 2>&1 &&
        grep -q '^mpi: 15 buckets (--mpi-bucket-mb), 15 started during backward$' "$tmp/log"; then
    ok "--mpi-bucket-mb 0.01: all 15 buckets start during backward"
else
    bad "--mpi-bucket-mb 0.01: the buckets did not all start during backward"
fi
# Built with --kvstore=dist_sync, the program carries the pass's buckets
# (RtModel.kv_*) and the engine uses them: its buckets are --dump=program's
# kvbucket lines, both start during backward, and the training is bit for bit
# --sim-ranks 2's (the sums are per element, whatever the buckets).
kvf=(--amp=float16 --kvstore=dist_sync --machines=2 --kv-bucket-mb=0.01)
"$ampc" examples/digits_cnn.sym "${kvf[@]}" --dump=program 2>/dev/null |
    sed -n 's/^kvbucket \([0-9]*\) bytes=[0-9]* /mpi: bucket \1 /p' >"$tmp/pass_buckets"
if "$ampc" examples/digits_cnn.sym "${kvf[@]}" -o "$tmp/d_kv" >"$tmp/log" 2>&1 &&
        timeout 120 env AMPC_MPI_DEBUG=1 "${MPIRUN[@]}" -np 2 "$tmp/d_kv" "${common[@]}" \
        --epochs 2 --save-dir "$tmp/ck_kv" --save-all-ranks >"$tmp/log" 2>&1; then
    grep '^mpi: bucket ' "$tmp/log" >"$tmp/engine_buckets"
    if [ "$(wc -l <"$tmp/pass_buckets")" -ge 2 ] && cmp -s "$tmp/pass_buckets" "$tmp/engine_buckets" &&
            grep -q "^mpi: $(wc -l <"$tmp/pass_buckets") buckets (the program's kvstore buckets), $(wc -l <"$tmp/pass_buckets") started during backward$" "$tmp/log"; then
        ok "--kvstore=dist_sync: the engine's buckets are the pass's ($(wc -l <"$tmp/pass_buckets")), started during backward"
    else
        bad "--kvstore=dist_sync: the engine's buckets differ from --dump=program's"
        diff "$tmp/pass_buckets" "$tmp/engine_buckets" | head -6 | sed 's/^/    /'
    fi
    if cmp -s "$tmp/sim_float16/digits_cnn-0002.ckpt" "$tmp/ck_kv/rank1/digits_cnn-0002.ckpt"; then
        ok "--kvstore=dist_sync: mpirun -np 2 with the pass's buckets equals --sim-ranks 2 bit for bit"
    else
        bad "--kvstore=dist_sync: mpirun -np 2 with the pass's buckets differs from --sim-ranks 2"
    fi
else
    bad "--kvstore=dist_sync: building or running the program"
fi
# The --mpi program started without mpirun (one rank) and --sim-ranks 2: the
# train step runs twice before the all-reduce, so the gradients announced in
# the first pass are stale; the engine reduces the summed ones after the fact
# and trains to the bits of the program built without --mpi.
if timeout 120 "$tmp/d_float16" "${common[@]}" --epochs 2 --sim-ranks 2 --save-dir "$tmp/sim_mpi" \
        >"$tmp/log" 2>&1 &&
        cmp -s "$tmp/sim_mpi/digits_cnn-0002.ckpt" "$tmp/sim_float16/digits_cnn-0002.ckpt"; then
    ok "the --mpi program alone with --sim-ranks 2 equals the one without --mpi bit for bit"
else
    bad "the --mpi program alone with --sim-ranks 2 differs from the one without --mpi"
fi
if timeout 120 "$tmp/d_one" --data digits --batch-size 32 --log-interval 0 --threads 1 --epochs 2 \
        >"$tmp/log" 2>&1; then
    a1=$(sed -n 's/^Final validation-accuracy=//p' "$tmp/log")
    a2=$(sed -n 's/^Final validation-accuracy=//p' "$tmp/log_off")
    if python3 -c "import sys; sys.exit(0 if abs($a1 - $a2) <= 0.05 else 1)" 2>/dev/null; then
        ok "2 ranks x 16 and 1 process x 32: validation accuracy $a2 and $a1 (within 0.05)"
    else
        bad "2 ranks x 16 and 1 process x 32: validation accuracy '$a2' and '$a1' (not within 0.05)"
    fi
else
    bad "one process at batch 32"
fi

# a source that decodes ahead (recordio's plan) under MPI: each rank plans its own shard
bd=$(dirname "$ampc")
fm=/usr/share/datasets/fashion-mnist
[ -s "$data/fashion-mnist/train-images-idx3-ubyte.gz" ] && fm=$data/fashion-mnist
if [ -x "$bd/im2rec" ] && [ -x "$bd/rio_tool" ] && [ -s "$fm/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$tmp/img"
    if "$bd/rio_tool" images "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" 200 \
            "$tmp/img" >"$tmp/log" 2>&1 && "$bd/im2rec" "$tmp/img/png.lst" "$tmp/img" "$tmp/f.rec" \
            >"$tmp/log" 2>&1 &&
            "$ampc" examples/fashion_cnn.sym --mpi -o "$tmp/fm" >"$tmp/log" 2>&1 &&
            "$ampc" examples/fashion_cnn.sym -o "$tmp/f1" >"$tmp/log" 2>&1 &&
            timeout 120 "${MPIRUN[@]}" -np 2 "$tmp/fm" --data "recordio($tmp/f.rec)" --batch-size 16 \
                --epochs 2 --log-interval 0 --threads 1 --save-dir "$tmp/fr" --save-all-ranks \
                >"$tmp/log" 2>&1 &&
            timeout 120 "$tmp/f1" --data "recordio($tmp/f.rec)" --batch-size 16 --epochs 2 \
                --log-interval 0 --threads 1 --sim-ranks 2 --save-dir "$tmp/fs" >"$tmp/log" 2>&1 &&
            cmp -s "$tmp/fs/fashion_cnn-0002.ckpt" "$tmp/fr/rank1/fashion_cnn-0002.ckpt"; then
        ok "recordio (decoded ahead) under mpirun -np 2 equals --sim-ranks 2 bit for bit"
    else
        bad "recordio under mpirun -np 2 and --sim-ranks 2"
    fi
else
    echo "SKIPPED: mpi.sh: the recordio case needs $bd/im2rec and $bd/rio_tool (make's recordio targets) and Fashion-MNIST"
fi

# ---- 3. an overflow on one rank skips the step on both ------------------------------
run_steps() { # name extra-flags...
    local name=$1; shift
    timeout 120 "${MPIRUN[@]}" -np 2 "$tmp/d_float16" "${common[@]}" --epochs 1 --max-steps 25 \
        --save-dir "$tmp/$name" --save-all-ranks "$@" >"$tmp/log" 2>&1
}
if run_steps ov_base && run_steps ov_inj --inject-inf-at-step 20 --inject-rank 1; then
    grep -q 'overflow\|non-finite\|nonfinite\|skipp' "$tmp/log" ||
        bad "rank 0's log does not report the skipped step"
    # 25 steps stop inside the first epoch: the checkpoints are named by step
    b0=$tmp/ov_base/digits_cnn-step000025.ckpt i0=$tmp/ov_inj/digits_cnn-step000025.ckpt
    i1=$tmp/ov_inj/rank1/digits_cnn-step000025.ckpt
    sb=$(field "$b0" skipped) s0=$(field "$i0" skipped) s1=$(field "$i1" skipped)
    ub=$(field "$b0" num_update) u0=$(field "$i0" num_update) u1=$(field "$i1" num_update)
    if [ -n "$sb" ] && [ "$s0" = $((sb + 1)) ] && [ "$s1" = "$s0" ] && [ "$u0" = $((ub - 1)) ] &&
            [ "$u1" = "$u0" ] && [ "$(trainable "$i0")" = "$(trainable "$i1")" ]; then
        ok "an overflow on rank 1 skips the step on both ranks (skipped $sb -> $s0, updates $ub -> $u0)"
    else
        bad "overflow on rank 1: skipped base=$sb rank0=$s0 rank1=$s1, updates base=$ub rank0=$u0 rank1=$u1"
    fi
    # the same overflow in one process simulating both ranks: the same bits
    if timeout 120 "$tmp/one_float16" "${common[@]}" --epochs 1 --max-steps 25 --sim-ranks 2 \
            --inject-inf-at-step 20 --inject-rank 1 --save-dir "$tmp/ov_sim" >"$tmp/log" 2>&1 &&
            cmp -s "$tmp/ov_sim/digits_cnn-step000025.ckpt" "$i1"; then
        ok "the overflow on rank 1 under --sim-ranks 2: the same checkpoint as mpirun's rank 1"
    else
        bad "the overflow on rank 1 under --sim-ranks 2 differs from mpirun's"
    fi
else
    bad "the overflow runs"
fi

# ---- 4. a stopped rank: the other names it and the job ends -------------------------
timeout 120 "${MPIRUN[@]}" -np 2 "$tmp/d_off" "${common[@]}" --epochs 1000 --mpi-timeout 3 \
    >"$tmp/log" 2>&1 &
job=$!
pids="$job"
r1=""
for _ in $(seq 1 100); do # the rank-1 process (its environment says which rank it is)
    for p in $(pgrep -f "$tmp/d_off" 2>/dev/null); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
            r1=$p
        fi
    done
    [ -n "$r1" ] && grep -q '^Epoch\[0\]' "$tmp/log" 2>/dev/null && break
    sleep 0.2
done
if [ -z "$r1" ]; then
    bad "SIGSTOP: rank 1's process not found"
else
    pids="$job $r1"
    sleep 0.5
    kill -STOP "$r1"
    t0=$(date +%s)
    wait "$job"
    rc=$?
    dt=$(( $(date +%s) - t0 ))
    kill -KILL "$r1" 2>/dev/null
    if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$dt" -le 20 ] &&
            grep -q 'rank 1 did not arrive' "$tmp/log"; then
        ok "rank 1 stopped: the job ends in ${dt} s (--mpi-timeout 3), exit $rc, naming rank 1"
    else
        bad "rank 1 stopped: exit $rc after ${dt} s"
        grep 'mpi:' "$tmp/log" | head -3 | sed 's/^/    /'
    fi
fi

# ---- 5. a 2-rank checkpoint resumes with 1 rank ---------------------------------------
c2=$tmp/ck_off/digits_cnn-0001.ckpt
step1=$(field "$c2" step)
if timeout 120 "$tmp/d_one" --data digits --batch-size 32 --log-interval 0 --threads 1 --epochs 2 \
        --resume "$c2" --save-dir "$tmp/res1" >"$tmp/log" 2>&1 &&
        [ "$(field "$tmp/res1/digits_cnn-0002.ckpt" step)" = $((2 * step1)) ]; then
    ok "a 2-rank checkpoint resumes in one process at the same global batch (step $step1 -> $((2 * step1)))"
else
    bad "resuming a 2-rank checkpoint in one process"
fi
if timeout 120 "${MPIRUN[@]}" -np 1 "$tmp/d_off" --data digits --batch-size 32 --log-interval 0 \
        --threads 1 --epochs 2 --resume "$c2" --save-dir "$tmp/res2" >"$tmp/log" 2>&1 &&
        [ "$(field "$tmp/res2/digits_cnn-0002.ckpt" step)" = $((2 * step1)) ]; then
    ok "a 2-rank checkpoint resumes under mpirun -np 1"
else
    bad "resuming a 2-rank checkpoint under mpirun -np 1"
fi

# ---- 6. only a program built for MPI links it -----------------------------------------
if ldd "$tmp/d_one" | grep -q libmpi; then
    bad "a program built without --mpi links libmpi"
elif ! ldd "$tmp/d_off" | grep -q libmpi; then
    bad "a program built with --mpi does not link libmpi"
else
    ok "only the program built with --mpi links libmpi"
fi

# a runtime without the MPI engine: --mpi is refused with a message, exit 1
mkdir -p "$tmp/rtd/lib" && ln -s "$root/runtime" "$tmp/rtd/include" &&
    cp "$(dirname "$ampc")/libampcrt.a" "$tmp/rtd/lib/"
AMPC_RUNTIME_DIR=$tmp/rtd "$ampc" examples/digits_cnn.sym --mpi -o "$tmp/nompi" >"$tmp/log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q 'has no MPI engine (ampcmpi.o' "$tmp/log" && [ ! -e "$tmp/nompi" ]; then
    ok "--mpi without ampcmpi.o beside the runtime: exit 1 with a message"
else
    bad "--mpi without ampcmpi.o: exit $rc"
fi

echo "mpi.sh: $pass passed, $fail failed"
[ "$fail" = 0 ]
