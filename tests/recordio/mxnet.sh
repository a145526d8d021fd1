#!/usr/bin/env bash
# mxnet.sh - tools/im2rec against MXNet 1.9.1's own RecordIO writer and
# reader (docs/training.md, RecordIO; make mxnet-check runs it): for lists of
# PNG and JPEG files (Fashion-MNIST images written by rio_tool), a record
# whose IRHeader id and payload hold the record magic at aligned offsets
# (split twice: continuation flags 1, 2, 3), and a multi-label list
# (--pack-label), our .rec and .idx are byte-identical to what
# mx.recordio.MXIndexedRecordIO + mx.recordio.pack write, and MXNet reads
# ours back (tests/recordio/mxnet_compare.py); the runtime's reader then
# reads MXNet's file to the same pixels as ours; scikit-learn's two sample
# photos (real colour JPEGs) decode to RGB exactly as mx.image.imdecode, and
# resize=256 with the centred crop is within 1 grey level of MXNet's.
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
# scikit-learn's sample photos (real 640x427 colour JPEGs): decoded to RGB
# exactly as MXNet's mx.image.imdecode does, and resize=256 plus the centred
# 224x224 crop within 1 grey level of mx.image.resize_short + center_crop
# (OpenCV's fixed-point bilinear against our floating point)
photos=/usr/lib/python3/dist-packages/sklearn/datasets/images
if [ -s "$photos/china.jpg" ] && [ -s "$photos/flower.jpg" ]; then
    printf '0\t3\tchina.jpg\n1\t7\tflower.jpg\n' >"$tmp/photos.lst"
    if "$build/im2rec" "$tmp/photos.lst" "$photos" "$tmp/photos.rec" >/dev/null &&
       "$build/rio_tool" read "$tmp/photos.rec" "$tmp/full.out" 3 427 640 2 1 0 2 >/dev/null &&
       "$build/rio_tool" read "$tmp/photos.rec" "$tmp/crop.out" 3 224 224 2 1 0 2 resize=256 >/dev/null &&
       "$py" - "$tmp" <<'EOF2'
import sys
import mxnet as mx
import numpy as np
t = sys.argv[1]
r = mx.recordio.MXRecordIO(t + '/photos.rec', 'r')
full = np.fromfile(t + '/full.out', dtype=np.float32)
crop = np.fromfile(t + '/crop.out', dtype=np.float32)
nf, nc = 3 * 427 * 640, 3 * 224 * 224
ok = True
for k in range(2):
    h, img = mx.recordio.unpack(r.read())
    im = mx.image.imdecode(img)
    ref = im.asnumpy().transpose(2, 0, 1).astype(np.float32)
    d1 = np.abs(ref - full[k * nf:(k + 1) * nf].reshape(3, 427, 640)).max()
    cc, _ = mx.image.center_crop(mx.image.resize_short(im, 256, interp=1), (224, 224))
    d2 = np.abs(cc.asnumpy().transpose(2, 0, 1).astype(np.float32) -
                crop[k * nc:(k + 1) * nc].reshape(3, 224, 224)).max()
    lab = full[2 * nf + k]
    print('    photo %d: decode max |d| %g, resize 256 + centre crop max |d| %g, label %g' % (k, d1, d2, lab))
    ok &= d1 == 0 and d2 <= 1 and lab == h.label
sys.exit(0 if ok else 1)
EOF2
    then echo "PASS sklearn photos: RGB decode equal to mx.image.imdecode, resize+crop within 1 of MXNet's"
    else echo "FAIL sklearn photos against MXNet's decode"; fail=1; fi
elif [ "${AMPC_REQUIRE_MXNET:-0}" = 1 ]; then
    echo "FAIL sklearn's sample photos missing ($photos: apt-get install python3-sklearn, in tools/deps-test.txt) and AMPC_REQUIRE_MXNET=1"
    fail=1
else
    echo "SKIPPED: sklearn's sample photos missing ($photos: apt-get install python3-sklearn)"
fi
exit $fail
