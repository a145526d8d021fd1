#!/usr/bin/env bash
# mpi.sh - steps per second of digits_cnn (AMP float16) under mpirun -np 2
# (batch B per rank) against one process at the same global batch 2B, on the
# CPU (docs/kvstore.md, "Running on several processes").  Not in make check:
# the ratio depends on the cores (two ranks on two cores share them with the
# reduction).  usage: bench/mpi.sh AMPC DATA_DIR [B=64] [STEPS=200]
set -eu
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$(cd "$2" && pwd)
b=${3:-64} steps=${4:-200}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export AMPC_DATA_DIR="$data"
"$ampc" "$root/examples/digits_cnn.sym" --mpi -o "$tmp/d_mpi"
"$ampc" "$root/examples/digits_cnn.sym" -o "$tmp/d_one"
flags=(--data synthetic --max-steps "$steps" --epochs 1000000 --log-interval 0 --threads 1)
t0=$(date +%s.%N)
timeout 600 mpirun -np 2 --oversubscribe --bind-to none --mca btl self,vader \
    --mca btl_vader_single_copy_mechanism none "$tmp/d_mpi" "${flags[@]}" --batch-size "$b" >/dev/null
t1=$(date +%s.%N)
timeout 600 "$tmp/d_one" "${flags[@]}" --batch-size $((2 * b)) >/dev/null
t2=$(date +%s.%N)
python3 - "$t0" "$t1" "$t2" "$steps" "$b" <<'PY'
import sys
t0, t1, t2, steps, b = map(float, sys.argv[1:])
m, o = steps / (t1 - t0), steps / (t2 - t1)
print(f"digits_cnn AMP, global batch {2*int(b)}, {int(steps)} steps (start-up included):")
print(f"  mpirun -np 2 (batch {int(b)} per rank): {m:8.1f} steps/s")
print(f"  one process (batch {2*int(b)}):          {o:8.1f} steps/s")
print(f"  ratio 2 ranks / 1 process:            {m/o:8.2f}")
PY
