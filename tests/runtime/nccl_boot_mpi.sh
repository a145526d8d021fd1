#!/bin/sh
# nccl_boot_mpi.sh PROG - the NCCL engine's bootstrap over real MPI, two
# ranks (tests/runtime/nccl_boot_mpi.c): rank 0's unique id reaches rank 1;
# rank 0's failure to make it ends both with a message.  mpirun under
# timeout with the flags of tests/e2e/mpi.sh; stderr is never required empty
# (hwloc warns in containers).
set -u
prog=$1
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI 4.1 leaves its plugins' allocations at MPI_Finalize (docs/kvstore.md)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
run() {
    timeout 60 mpirun -np 2 --oversubscribe --bind-to none --mca btl self,vader \
        --mca btl_vader_single_copy_mechanism none "$prog" "$@"
}
out=$(run 2>&1); rc=$?
if [ $rc -ne 0 ] || [ "$(printf '%s\n' "$out" | grep -c "unique id arrived before comm init")" != 2 ] ||
   [ "$(printf '%s\n' "$out" | grep -c "rt_kv_open made this rank's nccl device")" != 2 ]; then
    printf 'FAIL nccl_boot_mpi.sh: two ranks, rc %d:\n%s\n' $rc "$out"; exit 1
fi
out=$(run --fail 2>&1); rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 124 ] ||
   ! printf '%s\n' "$out" | grep -q "rank 0: nccl: rank 0: ncclGetUniqueId failed at .*unhandled system error" ||
   ! printf '%s\n' "$out" | grep -q "rank 1: nccl: rank 1: rank 0 could not make NCCL's unique id"; then
    printf 'FAIL nccl_boot_mpi.sh: rank 0 failing, rc %d:\n%s\n' $rc "$out"; exit 1
fi
echo "nccl_boot_mpi.sh: the unique id crosses MPI to every rank, rt_kv_open makes each rank's nccl device; rank 0's failure ends both ranks"
