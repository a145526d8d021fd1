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
#   3. optim.c's update and finite check are called by the CPU device only
#      (runtime/cpu/device.c), not by any file of the driver.
# Comments are stripped first, so prose may name anything.
# usage: device_seam.sh [ROOT]
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
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
for f in runtime/*.c; do
    [ "$f" = runtime/optim.c ] && continue
    if hits=$(strip "$f" | grep -nE "\\b(rt_optim_step2?|rt_optim_grads_finite|rt_optim_first_nonfinite)[[:space:]]*\\("); then
        echo "device_seam: $f calls optim.c's kernels directly (runtime/cpu/device.c does):"
        echo "$hits" | sed 's/^/    /'
        fail=1
    fi
done
[ "$fail" = 0 ] && echo "device_seam: runtime/train.c calls no kernel and holds no device pointer; only the CPU device calls the optimizer"
exit "$fail"
