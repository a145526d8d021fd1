#!/usr/bin/env bash
# The seam under the training loop (runtime/device.h): runtime/train.c, the
# loop, reaches the memory the steps run on only through the device
# interface, so a CUDA device can replace the CPU's.  Checked in the source:
#   1. train.c calls no kernel: no function declared in runtime/rt.h (the
#      CPU kernels' API, names read from the header, not listed here) and
#      none of optim.c's kernels (rt_optim_step*, rt_optim_grads_finite,
#      rt_optim_first_nonfinite);
#   2. train.c holds no pointer into a device buffer: no ctx.buf, ctx.master
#      or optimizer state[i] expression;
#   3. the optimizer's update and finite check (runtime/cpu/optim.c) are
#      called by the CPU device only (runtime/cpu/device.c; and the `local`
#      placement's host update, runtime/dist/kvplace.c), not by any file of
#      the driver or the data readers;
#   4. the runtime's folders include each other only along the edges listed
#      below (`allowed`): the backends (cpu/, cuda/), the data readers
#      (data/) and the engines of several devices (dist/) include nothing of
#      the loop: of runtime/'s own headers only the shared ones (rt.h,
#      program.h, device.h and the leaves rand.h, fileio.h, decimal.h), never train.h,
#      train_internal.h, lossscale.h, checkpoint.h, init.h, lr.h, hooks.h or
#      any other header of the driver; the driver reaches no backend's
#      header (cpu/, cuda/, emu/);
#   5. with LIBAMPCRT given: the runtime library that every program links
#      holds no test fake (no member or symbol named *fake*: the NCCL fake
#      transport is tests/runtime/nccl_fake.c's).
# Comments are stripped first, so prose may name anything.
# usage: device_seam.sh [ROOT [LIBAMPCRT]]
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
lib=${2:-}
cd "$root" || exit 2
fail=0
strip() { # C comments out, line numbers kept
    perl -0pe 's{/\*.*?\*/}{ my $s = $&; $s =~ s/[^\n]//g; $s }gse; s{//[^\n]*}{}g' "$1"
}
kernels=$(strip runtime/rt.h | grep -oE '\brt_[a-z0-9_]+[[:space:]]*\(' | tr -d '( \t' | sort -u)
[ -n "$kernels" ] && [ "$(echo "$kernels" | wc -l)" -gt 20 ] ||
    { echo "device_seam: read no kernel names from runtime/rt.h"; exit 1; }
optim="rt_optim_step rt_optim_step2 rt_optim_grads_finite rt_optim_first_nonfinite"
src=$(strip runtime/train.c)
for k in $kernels $optim; do
    if hits=$(echo "$src" | grep -nE "\\b$k[[:space:]]*\\("); then
        echo "device_seam: runtime/train.c calls the kernel $k (go through device.h):"
        echo "$hits" | sed 's/^/    /'
        fail=1
    fi
done
if hits=$(echo "$src" | grep -nE '\bctx(\.|->)(buf|master)\b|\bstate2?\['); then
    echo "device_seam: runtime/train.c reaches into device buffers (ctx.buf, ctx.master, state[i]):"
    echo "$hits" | sed 's/^/    /'
    fail=1
fi
for f in runtime/*.c runtime/data/*.c; do
    if hits=$(strip "$f" | grep -nE "\\b(rt_optim_step2?|rt_optim_grads_finite|rt_optim_first_nonfinite)[[:space:]]*\\("); then
        echo "device_seam: $f calls optim.c's kernels directly (runtime/cpu/device.c does):"
        echo "$hits" | sed 's/^/    /'
        fail=1
    fi
done

# 4. include edges: FOLDER -> the headers (paths under runtime/, globs) it may include
allowed() {
    case $1 in
    cpu) echo "cpu/* kernels/* rt.h program.h device.h" ;;
    # fileio.h: the leaf file-safety module (the cuDNN plan cache file, cuda/tune.c)
    cuda) echo "cuda/* kernels/* emu/* rt.h program.h device.h dist/coll.h fileio.h" ;;
    # kernels/splitmix.h: the generator the synthetic source shares with its CUDA kernel
    data) echo "data/* kernels/* rand.h fileio.h decimal.h" ;;
    # cpu/cpu.h: the `local` placement updates on the host with the CPU's optimizer
    dist) echo "dist/* kernels/* rt.h program.h device.h rand.h cpu/cpu.h" ;;
    emu) echo "emu/* cuda/* kernels/* rt.h" ;;
    kernels) echo "kernels/*" ;;
    .) echo "ROOT data/* dist/* kernels/*" ;; # ROOT: a header of runtime/ itself
    esac
}
# the header a quoted include in runtime/DIR/FILE names, as a path under runtime/
resolve() { # DIR NAME
    if [ "$1" != . ] && [ -f "runtime/$1/$2" ]; then echo "$1/$2"; else echo "$2"; fi
}
nedges=0
for f in runtime/*.[ch] runtime/*/*.[ch] runtime/*/*.cu runtime/*/*.cuh; do
    [ -f "$f" ] || continue
    dir=$(dirname "${f#runtime/}")
    ok=$(allowed "$dir")
    [ -n "$ok" ] || { echo "device_seam: $f: a folder of runtime/ not in the allowed list"; fail=1; continue; }
    while IFS= read -r inc; do
        h=$(resolve "$dir" "$inc")
        [ -f "runtime/$h" ] || continue  # a generated header (version.h) or another tree's
        nedges=$((nedges + 1))
        hit=0
        for pat in $ok; do
            if [ "$pat" = ROOT ]; then
                case $h in */*) ;; *) hit=1 ;; esac
            else
                # shellcheck disable=SC2254
                case $h in $pat) hit=1 ;; esac
            fi
        done
        if [ $hit = 0 ]; then
            echo "device_seam: $f includes $h: not an allowed edge from runtime/$dir/ ($ok)"
            fail=1
        fi
    done < <(strip "$f" | sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p')
done

# 5. no test fake in the runtime library
if [ -n "$lib" ]; then
    if ! [ -f "$lib" ]; then
        echo "device_seam: $lib: no such library"; fail=1
    elif bad=$( { ar t "$lib"; nm --defined-only "$lib" 2>/dev/null; } | grep -i fake); then
        echo "device_seam: $lib holds a test fake (its place is tests/):"
        echo "$bad" | sed 's/^/    /' | head -5
        fail=1
    fi
fi

[ "$fail" = 0 ] && echo "device_seam: runtime/train.c calls no kernel and holds no device pointer; only the CPU device calls the optimizer; $nedges include edges between runtime's headers, each allowed${lib:+; no test fake in $(basename "$lib")}"
exit "$fail"
