#!/bin/sh
# cuda_state_check.sh LIBAMPCCUDA [CC] - runtime/cuda/ keeps no per-run or
# per-device state of its own (issue 23; docs/backend-cuda.md, "The run
# state"): every writable object of the CUDA runtime library (the symbols
# objdump places in .data, .bss, .tdata or .tbss; .data.rel.ro is read-only
# once relocated) is on the list below, or is what nvcc writes for every
# kernel (its launch stubs' caches, the fat binary's handle) or what a
# sanitizer build adds (clang's __unnamed_N: UBSan's source locations, which
# its handlers write, in asan-check's library).  The run state
# lives in the context the device owns (rt_cuda.h's RtCudaCtx).
#
# Allowed, process-wide and set once:
#   libs.c            handles, where, lock: the libraries dlopen found, and where
#   nccl_transport.c  fns, resolved, mu: NCCL's functions, resolved once
#   check.c           last: the thread's last error text (thread-local)
# With CC, the check is first run on an archive of one planted static, which
# it must report (so a broken parser cannot pass everything).
set -u
lib=$1
cc=${2:-}
allowed="libs.c.o:handles libs.c.o:where libs.c.o:lock nccl_transport.c.o:fns
nccl_transport.c.o:resolved nccl_transport.c.o:mu check.c.o:last"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# state ARCHIVE: "member:symbol" for each writable object that is not nvcc's
state() {
    mkdir -p "$tmp/x" && rm -f "$tmp/x"/*
    (cd "$tmp/x" && ar x "$1") || return 2
    for o in "$tmp/x"/*.o; do
        objdump -t "$o" | awk -v o="$(basename "$o")" '
            $0 ~ / (\.data|\.bss|\.tdata|\.tbss)/ && $0 !~ /\.data\.rel\.ro/ && $NF !~ /^\./ &&
            $NF !~ /__device_stub__|__cudaFatCubinHandle|__fatDeviceText|__gxx_personality_v0/ &&
            $NF !~ /^__unnamed_[0-9]+$/ {
                print o ":" $NF
            }'
    done | sort -u
}

if [ -n "$cc" ]; then
    printf 'static int planted_count;\nint planted_bump(void) { return ++planted_count; }\n' \
        >"$tmp/planted.c"
    if ! $cc -c "$tmp/planted.c" -o "$tmp/planted.c.o" 2>"$tmp/log" ||
        ! ar rcs "$tmp/planted.a" "$tmp/planted.c.o"; then
        echo "cuda_state_check: FAIL: building the planted archive: $(cat "$tmp/log")"
        exit 1
    fi
    if ! state "$tmp/planted.a" | grep -qx 'planted.c.o:planted_count'; then
        echo "cuda_state_check: FAIL: a planted static (planted_count) was not reported"
        exit 1
    fi
fi

[ -f "$lib" ] || { echo "cuda_state_check: $lib missing (make cuda first)"; exit 1; }
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
found=$(state "$lib") || { echo "cuda_state_check: cannot read $lib"; exit 1; }
fail=0
n=0
for s in $found; do
    n=$((n + 1))
    case " $(echo $allowed) " in
    *" $s "*) ;;
    *) echo "cuda_state_check: FAIL: $s: writable state in runtime/cuda/ (keep it in the device's context, RtCudaCtx)"; fail=1 ;;
    esac
done
[ $fail = 0 ] && echo "cuda_state_check: $(basename "$lib") keeps no state but the $n allowed (libs.c's handles, where, lock; the NCCL transport's fns, resolved, mu; check.c's thread-local last error)"
exit $fail
