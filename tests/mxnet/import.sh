#!/usr/bin/env bash
# import.sh - ampc's MXNet symbol JSON import (--from-mxnet) and export
# (--emit-mxnet-json) against MXNet 1.9.1 itself (docs/mxnet.md, "Symbol
# JSON"): the examples exported and read by MXNet, Gluon model-zoo networks
# imported and predicting what MXNet does, AMP decisions against MXNet's
# convert_symbol.  The checks are in import_mx.py, one Python process.
#
# usage: tests/mxnet/import.sh AMPC
# Needs the environment of `make mxnet-env` ($MXNET_ENV, default
# build/mxnet-env).  Without it: one SKIPPED line, exit 0; with
# AMPC_REQUIRE_MXNET=1 (CI): a failure.
set -u
ampc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
env=${MXNET_ENV:-$root/build/mxnet-env}
py=$env/bin/python
if [ ! -x "$py" ] || ! ls "$env"/lib/python3*/site-packages/mxnet/__init__.py >/dev/null 2>&1; then
    if [ "${AMPC_REQUIRE_MXNET:-0}" = 1 ]; then
        echo "import.sh: FAILED: no MXNet environment at $env and AMPC_REQUIRE_MXNET=1 (make mxnet-env)"
        exit 1
    fi
    echo "SKIPPED: tests/mxnet/import.sh: no MXNet environment at $env (make mxnet-env makes it)"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ampc-mximport.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$root" || exit 2
"$py" "$root/tests/mxnet/import_mx.py" "$ampc" "$tmp"
