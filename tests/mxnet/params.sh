#!/usr/bin/env bash
# params.sh - the training program's MXNet side against MXNet 1.9.1 itself
# (docs/mxnet.md, "Weights and prediction"): --load-params of files MXNet
# saved, --predict compared with MXNet's forward, --save-params loaded back
# by MXNet, and bad files refused.  The comparisons are in params_mx.py,
# one Python process (importing MXNet takes seconds).
#
# usage: tests/mxnet/params.sh AMPC
# Needs the environment of `make mxnet-env` ($MXNET_ENV, default
# build/mxnet-env).  Without it: one SKIPPED line, exit 0; with
# AMPC_REQUIRE_MXNET=1 (CI): a failure.
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
env=${MXNET_ENV:-$root/build/mxnet-env}
py=$env/bin/python
if [ ! -x "$py" ] || [ ! -d "$env/lib" ] || ! ls "$env"/lib/python3*/site-packages/mxnet/__init__.py >/dev/null 2>&1; then
    if [ "${AMPC_REQUIRE_MXNET:-0}" = 1 ]; then
        echo "params.sh: FAILED: no MXNet environment at $env and AMPC_REQUIRE_MXNET=1 (make mxnet-env)"
        exit 1
    fi
    echo "SKIPPED: tests/mxnet/params.sh: no MXNet environment at $env (make mxnet-env makes it)"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ampc-mxparams.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$root" || exit 2
# the programs: the MLP and the BatchNorm CNN, fp32 and AMP float16 (the MLP in
# bfloat16 too)
for spec in "mlp examples/mlp.sym" "mlp16 examples/mlp.sym --amp=float16" \
            "mlpbf examples/mlp.sym --amp=bfloat16" \
            "cnn examples/digits_cnn.sym --amp=off" "cnn16 examples/digits_cnn.sym --amp=float16"; do
    set -- $spec
    name=$1 src=$2
    shift 2
    if ! "$ampc" "$src" "$@" -o "$tmp/$name" >"$tmp/$name.log" 2>&1; then
        echo "params.sh: FAILED: ampc $src $* -o $name:"
        sed 's/^/    /' "$tmp/$name.log"
        exit 1
    fi
done
exec "$py" "$root/tests/mxnet/params_mx.py" "$tmp"
