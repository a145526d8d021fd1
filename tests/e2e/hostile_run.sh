#!/usr/bin/env bash
# Hostile inputs and outputs of the training program (docs/training.md,
# Files), on the runtime's own main linked with the hand-written model of
# tests/runtime/model_tiny.c (an MLP on 8x8 inputs, model tiny_mlp):
#   1. an output naming an input: --json-log or --dump-state naming the
#      --resume checkpoint or the data file is refused (exit 2) and the input
#      is byte-identical afterwards; --dump-state replaces a regular file by
#      a rename (a new inode, no temporary file left) and writes a pipe or a
#      device node (made by mknod in the scratch folder) directly;
#      two outputs naming one file (--save-params, --json-log, --dump-state:
#      a new path, a hard link, ./x for x) are refused, /dev/null takes several;
#   2. a FIFO as the checkpoint or as digits.csv.gz, and digits.csv.gz
#      pointing at /dev/zero, are refused at once (no hang);
#   3. lost writes: --json-log /dev/full and a text log to /dev/full exit 1;
#   4. leftovers: a stale <model>-NNNN.ckpt.tmp.XXXXXX in the save
#      directory is removed at the start, and nothing else there;
#   5. a forged checkpoint (valid checksums, epoch = INT64_MAX) is refused
#      naming the field and the file; a resumed dynamic scale whose clean-step
#      count exceeds a shorter growth interval grows at the next clean step;
#   6. malformed data: gzip with trailing bytes, hex numbers in the CSV, and
#      1x64 IDX images fed to the 8x8 model, each with its location;
#   7. a program without MPI under a launcher of several processes
#      (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK, SLURM_STEP_NUM_TASKS in an
#      srun step) refused, SLURM_NTASKS alone not; --independent-runs copies
#      own their save dir and JSON log; --mpi-timeout 0.001 accepted.
# usage: hostile_run.sh AMPC DATA_DIR   (the runtime is the one next to AMPC)
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
data=$2
E2E_LOG_LINES=5
. "$(dirname "$0")/lib.sh"

lib=$(dirname "$ampc")/libampcrt.a
if ! cc -std=c11 -D_GNU_SOURCE -Iruntime tests/runtime/model_tiny.c "$lib" -lopenblas -lz -lm \
        -o "$tmp/tiny" >"$tmp/log" 2>&1; then
    bad "building the tiny program"
    echo "hostile_run: $pass passed, $fail failed"
    exit 1
fi
if [ ! -f "$data/digits.csv.gz" ]; then
    echo "hostile_run: $data/digits.csv.gz missing (make data)"
    exit 1
fi
mkdir -p "$tmp/d" && cp "$data/digits.csv.gz" "$tmp/d/"
tiny() { timeout 60 "$tmp/tiny" --data digits --data-dir "$tmp/d" --log-interval 0 "$@"; }

# a checkpoint to resume from
tiny --epochs 1 --save-dir "$tmp/ck" >"$tmp/log" 2>&1 || bad "a first run with --save-dir"
ckpt=$tmp/ck/tiny_mlp-0001.ckpt
cp "$ckpt" "$tmp/ckpt.orig"

# 1. outputs naming inputs
for flag in --json-log --dump-state; do
    tiny --epochs 2 --resume "$ckpt" "$flag" "$ckpt" >"$tmp/log" 2>&1
    rc=$?
    if [ $rc -eq 2 ] && cmp -s "$ckpt" "$tmp/ckpt.orig" &&
       grep -q -- "$flag $ckpt: this file is one of the run's inputs; refusing to overwrite it" "$tmp/log"; then
        ok "$flag naming the --resume checkpoint is refused (exit 2), the checkpoint intact"
    else bad "$flag naming the --resume checkpoint (exit $rc)"; fi
done
# two outputs naming one file (a new path, a hard link): one would be lost; the
# null device (a character device) takes several
echo keep >"$tmp/kept" && ln -f "$tmp/kept" "$tmp/kept.hard"
for pair in "--save-params $tmp/same --json-log $tmp/same" \
            "--save-params $tmp/kept --dump-state $tmp/kept.hard" \
            "--json-log $tmp/./same --dump-state $tmp/same"; do
    # shellcheck disable=SC2086
    tiny --max-steps 1 $pair >"$tmp/log" 2>&1
    rc=$?
    if [ $rc -eq 2 ] && grep -q "name the same file: one would be lost" "$tmp/log" &&
       [ ! -e "$tmp/same" ] && [ "$(cat "$tmp/kept")" = keep ]; then
        ok "two outputs naming one file are refused before anything is written ($pair)"
    else bad "two outputs naming one file ($pair): exit $rc"; fi
done
if tiny --max-steps 1 --save-params /dev/null --json-log /dev/null --dump-state /dev/null >"$tmp/log" 2>&1; then
    ok "the null device takes several outputs"
else bad "several outputs to /dev/null"; fi
cp "$tmp/d/digits.csv.gz" "$tmp/digits.orig"
tiny --max-steps 1 --json-log "$tmp/d/digits.csv.gz" >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 2 ] && cmp -s "$tmp/d/digits.csv.gz" "$tmp/digits.orig"; then
    ok "--json-log naming the data file is refused, the data intact"
else bad "--json-log naming the data file (exit $rc)"; fi
ln "$ckpt" "$tmp/hardlink.params"
tiny --max-steps 1 --resume "$ckpt" --dump-state "$tmp/hardlink.params" >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 2 ] && cmp -s "$ckpt" "$tmp/ckpt.orig"; then
    ok "--dump-state naming a hard link of the checkpoint (same inode) is refused"
else bad "--dump-state on a hard link of the input (exit $rc)"; fi
echo old >"$tmp/state"
ino0=$(stat -c %i "$tmp/state")
ln "$tmp/state" "$tmp/state.link"
if tiny --dump-state "$tmp/state" >"$tmp/log" 2>&1 && [ "$(stat -c %i "$tmp/state")" != "$ino0" ] &&
   [ "$(cat "$tmp/state.link")" = old ] && [ "$(head -c 8 "$tmp/state")" = AMPCSTAT ] &&
   ! ls "$tmp" | grep -q '\.tmp\.'; then
    ok "--dump-state replaces a regular file by a rename (old inode untouched, no temporary left)"
else bad "--dump-state onto a regular file"; fi
n=$(tiny --dump-state /dev/fd/3 3>&1 >/dev/null 2>"$tmp/log" | head -c 8)
if [ "$n" = AMPCSTAT ]; then ok "--dump-state to a pipe (/dev/fd/3) writes it directly"
else bad "--dump-state /dev/fd/3 (got '$n')"; fi
# as root a rename over a device node would replace it: a node made in the
# scratch folder (never the real /dev) stays a device
if mknod "$tmp/null" c 1 3 2>/dev/null; then
    if tiny --dump-state "$tmp/null" >"$tmp/log" 2>&1 && [ -c "$tmp/null" ] &&
       tiny --max-steps 1 --json-log "$tmp/null" >"$tmp/log" 2>&1 && [ -c "$tmp/null" ]; then
        ok "--dump-state and --json-log write a device node in place (still a device)"
    else bad "a device node as --dump-state / --json-log"; fi
else echo "SKIP device node (mknod not permitted)"; fi

# 2. FIFOs and devices as inputs: refused at once
mkfifo "$tmp/fifo.params"
tiny --resume "$tmp/fifo.params" >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "checkpoint $tmp/fifo.params: not a regular file (a FIFO)" "$tmp/log"; then
    ok "a FIFO as --resume is refused without blocking"
else bad "a FIFO as --resume (exit $rc; 124 is a hang)"; fi
mkdir -p "$tmp/fifo" && mkfifo "$tmp/fifo/digits.csv.gz"
timeout 60 "$tmp/tiny" --data digits --data-dir "$tmp/fifo" >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "digits.csv.gz: not a regular file (a FIFO)" "$tmp/log"; then
    ok "a FIFO as digits.csv.gz is refused without blocking"
else bad "a FIFO as digits.csv.gz (exit $rc)"; fi
mkdir -p "$tmp/zero" && ln -s /dev/zero "$tmp/zero/digits.csv.gz"
timeout 60 "$tmp/tiny" --data digits --data-dir "$tmp/zero" >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "not a regular file (a character device)" "$tmp/log"; then
    ok "digits.csv.gz pointing at /dev/zero is refused at once"
else bad "digits.csv.gz -> /dev/zero (exit $rc)"; fi

# 3. lost writes
tiny --max-steps 2 --json-log /dev/full >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "json-log /dev/full: write error: No space left on device" "$tmp/log"; then
    ok "--json-log on a full disk (/dev/full) exits 1 naming the error"
else bad "--json-log /dev/full (exit $rc)"; fi
tiny --max-steps 2 >/dev/full 2>"$tmp/log"
rc=$?
if [ $rc -eq 1 ] && grep -q "cannot write the log to standard output" "$tmp/log"; then
    ok "a text log to /dev/full exits 1"
else bad "stdout on /dev/full (exit $rc)"; fi

# 4. leftovers of a run killed while saving
mkdir -p "$tmp/sv"
keep="tiny_mlp-0001.ckpt.tmp.AbC12 other-0001.ckpt.tmp.AbC123 tiny_mlp-01.params.tmp.AbC123 notes.txt tiny_mlp-0001.ckpt.tmp.AbC123x"
# (tiny_mlp-0004.params.tmp...: a temporary of the checkpoints' old name)
for f in $keep tiny_mlp-0003.ckpt.tmp.q1W2e3 tiny_mlp-0001.ckpt.tmp.AbC123 tiny_mlp-0004.params.tmp.Old123; do echo x >"$tmp/sv/$f"; done
mkdir "$tmp/sv/tiny_mlp-0002.ckpt.tmp.Dir123"
tiny --max-steps 1 --save-dir "$tmp/sv" >"$tmp/log" 2>&1
rc=$?
left=$(ls "$tmp/sv" | tr '\n' ' ')
all_kept=true
for f in $keep tiny_mlp-0002.ckpt.tmp.Dir123; do [ -e "$tmp/sv/$f" ] || all_kept=false; done
if [ $rc -eq 0 ] && [ ! -e "$tmp/sv/tiny_mlp-0003.ckpt.tmp.q1W2e3" ] &&
   [ ! -e "$tmp/sv/tiny_mlp-0001.ckpt.tmp.AbC123" ] && [ ! -e "$tmp/sv/tiny_mlp-0004.params.tmp.Old123" ] &&
   $all_kept && [ "$(grep -c 'a temporary checkpoint file left by a run that stopped while saving' "$tmp/log")" = 3 ]; then
    ok "stale checkpoint temporaries of this model are removed at the start, nothing else"
else bad "stale temporaries (exit $rc; left: $left)"; fi
# a real SIGKILL during a save: a preloaded rename() kills the process just
# before the temporary file would become the checkpoint
cat >"$tmp/killer.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <string.h>
int rename(const char *from, const char *to)
{
    if (strstr(from, ".ckpt.tmp."))
        raise(SIGKILL);
    int (*real)(const char *, const char *) =
        (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    return real(from, to);
}
EOF
if cc -shared -fPIC -o "$tmp/killer.so" "$tmp/killer.c" -ldl 2>"$tmp/log"; then
    rc=$( { LD_PRELOAD=$tmp/killer.so "$tmp/tiny" --data digits --data-dir "$tmp/d" --epochs 2 \
        --save-dir "$tmp/kill" >/dev/null 2>&1; echo $?; } 2>/dev/null)
    before=$(ls "$tmp/kill" | grep -c '^tiny_mlp-0001\.ckpt\.tmp\.')
    tiny --max-steps 1 --save-dir "$tmp/kill" >"$tmp/log" 2>&1
    if [ $rc -eq 137 ] && [ "$before" = 1 ] && ! ls "$tmp/kill" | grep -q '\.tmp\.' &&
       grep -q "note: removed $tmp/kill/tiny_mlp-0001.ckpt.tmp." "$tmp/log"; then
        ok "a run killed (SIGKILL) while saving leaves a temporary file; the next run removes it"
    else bad "SIGKILL while saving (exit $rc, $before temporaries; now: $(ls "$tmp/kill" | tr '\n' ' '))"; fi
else bad "building the rename() shim"; fi

# 5. a forged checkpoint with valid checksums
python3 - "$tmp/ckpt.orig" "$tmp/forged.params" <<'EOF'
import struct, sys, zlib
b = bytearray(open(sys.argv[1], 'rb').read())
at = 32
for _ in range(2):                       # model name, amp
    n, = struct.unpack_from('<I', b, at); at += 4 + n
at += 8 + 8                              # seed, batch size
struct.pack_into('<q', b, at, 2**63 - 1) # epoch
struct.pack_into('<I', b, 24, zlib.crc32(bytes(b[32:])))
struct.pack_into('<I', b, 28, zlib.crc32(bytes(b[:28])))
open(sys.argv[2], 'wb').write(b)
EOF
tiny --epochs 2 --resume "$tmp/forged.params" >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "checkpoint $tmp/forged.params: run state out of range: epoch is 9223372036854775807" "$tmp/log"; then
    ok "a forged checkpoint (epoch INT64_MAX, valid crc) is refused naming the field"
else bad "forged epoch (exit $rc; 124 is a run that never ends)"; fi

# a dynamic scale's clean-step count (46 after one epoch) past a shorter
# growth interval on resume: grows at the next clean step, never counts on
tiny --epochs 1 --loss-scale dynamic --save-dir "$tmp/ls" >"$tmp/log" 2>&1
tiny --epochs 2 --loss-scale 'dynamic(interval=10)' --resume "$tmp/ls/tiny_mlp-0001.ckpt" \
    >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "count of clean steps (46) reaches this run's growth interval (10)" "$tmp/log" &&
   [ "$(grep -c 'AMP: increasing loss scale' "$tmp/log")" -ge 1 ] &&
   grep -q 'AMP: increasing loss scale to 131072' "$tmp/log"; then
    ok "a clean-step count past a shorter interval: the scale grows at the next clean step"
else bad "resumed clean-step count past the interval (exit $rc)"; fi

# another optimizer than the checkpoint's is said, not silent
tiny --epochs 2 --optimizer 'adam()' --resume "$ckpt" >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "note: the checkpoint was written with optimizer sgd; this run uses adam" "$tmp/log" &&
   grep -q "holds no Adam state (mean, var) for 4 parameters: it starts from zero" "$tmp/log"; then
    ok "resuming with another optimizer says so"
else bad "resume with another optimizer (exit $rc)"; fi

# 6. malformed data
mkdir -p "$tmp/trail" && { cat "$data/digits.csv.gz"; printf 'junk'; } >"$tmp/trail/digits.csv.gz"
size=$(stat -c %s "$data/digits.csv.gz")
tiny --max-steps 1 --data-dir "$tmp/trail" >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "digits.csv.gz: trailing data at byte $size after the end of the gzip stream" "$tmp/log"; then
    ok "gzip with trailing bytes is refused at the byte they start"
else bad "gzip with trailing garbage (exit $rc)"; fi
mkdir -p "$tmp/hex"
{ zcat "$data/digits.csv.gz" | head -3; printf '0x10,'; zcat "$data/digits.csv.gz" | sed -n 4p | cut -d, -f2-; } |
    gzip >"$tmp/hex/digits.csv.gz"
timeout 60 "$tmp/tiny" --data digits --data-dir "$tmp/hex" >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "digits.csv.gz:4: column 1: expected a number (decimal digits), found '0x10'" "$tmp/log"; then
    ok "a hex number in the digits CSV is refused with its line and column"
else bad "hex in the CSV (exit $rc)"; fi
python3 - "$tmp" <<'EOF'
import struct, sys
d = sys.argv[1]
def idx(name, dims, body):
    open(f'{d}/{name}', 'wb').write(struct.pack('>I', 0x800 + len(dims)) +
                                   b''.join(struct.pack('>I', x) for x in dims) + body)
idx('ti', [40, 1, 64], bytes(40 * 64)); idx('tl', [40], bytes(40))
idx('vi', [8, 1, 64], bytes(8 * 64));   idx('vl', [8], bytes(8))
EOF
timeout 60 "$tmp/tiny" --data "idx(\"$tmp/ti\", \"$tmp/tl\", \"$tmp/vi\", \"$tmp/vl\")" --batch-size 8 >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "data idx: its images are 1x1x64 (channels x rows x columns); model tiny_mlp takes 1x8x8 per sample" "$tmp/log"; then
    ok "1x64 IDX images are refused for the 8x8 model"
else bad "1x64 IDX images into an 8x8 model (exit $rc)"; fi

# 7. a program built without MPI under a launcher of several processes (its
# environment, as mpirun, hydra, PMIx and srun set it): refused with a message
# to build with --mpi, unless --independent-runs; SLURM_NTASKS alone (a batch
# script of one process) and Slurm's batch step are no launcher of several
for envs in "OMPI_COMM_WORLD_SIZE=2" "PMI_SIZE=3" "PMIX_RANK=1" \
            "SLURM_STEP_NUM_TASKS=2 SLURM_STEP_ID=0"; do
    # shellcheck disable=SC2086
    env $envs "$tmp/tiny" --data digits --data-dir "$tmp/d" --max-steps 1 >"$tmp/log" 2>&1
    rc=$?
    if [ $rc -eq 2 ] && grep -q "but this program was built without MPI: each process would train alone" "$tmp/log" &&
       grep -q "build it for mpirun with ampc --mpi" "$tmp/log"; then
        ok "under a launcher ($envs) a program without MPI is refused (exit 2)"
    else bad "a program without MPI under a launcher ($envs): exit $rc"; fi
done
for envs in "SLURM_NTASKS=4" "SLURM_STEP_NUM_TASKS=4 SLURM_STEP_ID=4294967294" "OMPI_COMM_WORLD_SIZE=1" \
            "PMI_SIZE=2x"; do
    # shellcheck disable=SC2086
    if env $envs "$tmp/tiny" --data digits --data-dir "$tmp/d" --max-steps 1 >"$tmp/log" 2>&1; then
        ok "$envs: one process, it runs"
    else bad "$envs: refused"; fi
done
# --independent-runs: each copy's save directory and JSON log are its own
# (an exclusive lock: a second copy naming either is refused before it
# touches them; distinct ones run)
PMI_SIZE=2 timeout 120 "$tmp/tiny" --data digits --data-dir "$tmp/d" --epochs 100000 --log-interval 0 \
    --independent-runs --save-dir "$tmp/ir1" --json-log "$tmp/ir1.json" >/dev/null 2>&1 &
first=$!
for _ in $(seq 1 200); do [ -s "$tmp/ir1.json" ] && break; sleep 0.02; done
for same in "--save-dir $tmp/ir1" "--json-log $tmp/ir1.json"; do
    # shellcheck disable=SC2086
    PMI_SIZE=2 tiny --max-steps 1 --independent-runs $same >"$tmp/log" 2>&1
    rc=$?
    if [ $rc -eq 2 ] && grep -q "another run writes it (--independent-runs: give each copy its own" "$tmp/log" &&
       [ -s "$tmp/ir1.json" ]; then
        ok "--independent-runs: a second copy naming the first's ${same%% *} is refused, the first's kept"
    else bad "--independent-runs with the same ${same%% *}: exit $rc"; fi
done
if PMI_SIZE=2 tiny --max-steps 1 --independent-runs --save-dir "$tmp/ir2" --json-log "$tmp/ir2.json" \
        >"$tmp/log" 2>&1; then
    ok "--independent-runs: a copy with its own save dir and log runs beside the first"
else bad "--independent-runs with distinct outputs"; fi
kill "$first" 2>/dev/null
wait "$first" 2>/dev/null
# --mpi-timeout's documented lower bound is accepted
if tiny --max-steps 1 --mpi-timeout 0.001 >"$tmp/log" 2>&1; then
    ok "--mpi-timeout 0.001 (the bound its message gives) is accepted"
else bad "--mpi-timeout 0.001 refused: $(head -1 "$tmp/log")"; fi

echo "hostile_run: $pass passed, $fail failed"
[ $fail -eq 0 ]
