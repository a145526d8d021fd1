#!/usr/bin/env bash
# mxnet.sh - tools/im2rec against MXNet 1.9.1's own RecordIO writer and
# reader (docs/training.md, RecordIO; make mxnet-check runs it): for lists of
# PNG and JPEG files (Fashion-MNIST images written by rio_tool), a record
# whose IRHeader id and payload hold the record magic at aligned offsets
# (split twice: continuation flags 1, 2, 3), and a multi-label list
# (--pack-label), our .rec and .idx are byte-identical to what
# mx.recordio.MXIndexedRecordIO + mx.recordio.pack write, and MXNet reads
# ours back (tests/recordio/mxnet_compare.py); the runtime's reader then
# reads MXNet's file to the same pixels as ours.
# usage: mxnet.sh BUILD   (BUILD holds im2rec and rio_tool)
# Needs `make mxnet-env` ($MXNET_ENV); without it one SKIPPED line, exit 0;
# with AMPC_REQUIRE_MXNET=1 (CI) a failure.  Fashion-MNIST likewise
# (AMPC_REQUIRE_FASHION=1).
set -u
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
env=${MXNET_ENV:-$root/build/mxnet-env}
py=$env/bin/python
if [ ! -x "$py" ] || ! ls "$env"/lib/python3*/site-packages/mxnet/__init__.py >/dev/null 2>&1; then
    if [ "${AMPC_REQUIRE_MXNET:-0}" = 1 ]; then
        echo "recordio/mxnet.sh: FAILED: no MXNet environment at $env and AMPC_REQUIRE_MXNET=1 (make mxnet-env)"
        exit 1
    fi
    echo "SKIPPED: tests/recordio/mxnet.sh: no MXNet environment at $env (make mxnet-env makes it)"
    exit 0
fi
dir=/usr/share/datasets/fashion-mnist
if [ ! -s "$dir/train-images-idx3-ubyte.gz" ]; then
    [ "${AMPC_REQUIRE_FASHION:-0}" = 1 ] && { echo "recordio/mxnet.sh: FAILED: no Fashion-MNIST in $dir"; exit 1; }
    echo "SKIPPED: tests/recordio/mxnet.sh: no Fashion-MNIST in $dir (apt-get install dataset-fashion-mnist)"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ampc-rio.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
"$build/rio_tool" images "$dir/train-images-idx3-ubyte.gz" "$dir/train-labels-idx1-ubyte.gz" 100 "$tmp" >/dev/null || exit 1
printf '5\t1\t2.5\t3\tpng/2.png\n6\t4\t0\t1\tpng/3.png\n7\t9\tjpg/4.jpg\n' >"$tmp/multi.lst"
for k in png jpg magic multi; do
    pack=; [ $k = multi ] && pack=--pack-label
    if "$build/im2rec" $pack "$tmp/$k.lst" "$tmp" "$tmp/$k.rec" >/dev/null &&
       "$py" "$root/tests/recordio/mxnet_compare.py" "$tmp/$k.lst" "$tmp" "$tmp/$k.rec" "$tmp/mx_$k.rec" $pack; then
        echo "PASS im2rec $pack $k.lst: byte-identical to MXNet's writer, read back by MXNet"
    else echo "FAIL im2rec $k.lst against MXNet"; fail=1; fi
done
for k in png magic; do
    if "$build/rio_tool" read "$tmp/mx_$k.rec" "$tmp/mx.out" 1 28 28 2 1 0 1 >/dev/null &&
       "$build/rio_tool" read "$tmp/$k.rec" "$tmp/our.out" 1 28 28 2 1 0 1 >/dev/null && cmp -s "$tmp/mx.out" "$tmp/our.out"; then
        echo "PASS the runtime reads MXNet's $k.rec to the same pixels and labels as ours"
    else echo "FAIL reading MXNet's $k.rec"; fail=1; fi
done
exit $fail
