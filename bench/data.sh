#!/usr/bin/env bash
# data.sh - the RecordIO image pipeline against MXNet 1.9.1's ImageRecordIter
# (docs/performance.md, "RecordIO input pipeline"; not in make check).
#
# The file: scikit-learn's two sample photos (python3-sklearn: china.jpg and
# flower.jpg, 640x427 JPEG) repeated to RECORDS records by tools/im2rec.
# The work, the same on both sides: decode, a random resized crop (area
# 0.08-1, ratio 3/4-4/3) to 224x224, a random mirror, (x - mean) / std per
# channel, into float32 CHW batches of 32; EPOCHS passes after one warm-up
# pass.  Images per second on 1 and 2 threads (ours: --data-threads, i.e.
# rio_tool read; MXNet: preprocess_threads), and the ratio.
#
# usage: bench/data.sh [BUILD]   (default build; needs make BUILD=.. build/../rio_tool
#        build/../im2rec, and make mxnet-env or MXNET_ENV for the peer)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
RECORDS=${RECORDS:-256} EPOCHS=${EPOCHS:-3}
env=${MXNET_ENV:-$root/build/mxnet-env}
py=$env/bin/python
photos=/usr/lib/python3/dist-packages/sklearn/datasets/images
[ -s "$photos/china.jpg" ] || { echo "data.sh: no $photos/china.jpg (apt-get install python3-sklearn)"; exit 2; }
[ -x "$build/rio_tool" ] && [ -x "$build/im2rec" ] || { echo "data.sh: make BUILD=$build $build/rio_tool $build/im2rec"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 0 $((RECORDS - 1))); do
    if [ $((i % 2)) = 0 ]; then printf '%d\t%d\tchina.jpg\n' $i 0; else printf '%d\t%d\tflower.jpg\n' $i 1; fi
done >"$tmp/photos.lst"
"$build/im2rec" "$tmp/photos.lst" "$photos" "$tmp/photos.rec" >/dev/null || exit 1
aug="random_resized_crop=1 rand_mirror=1 mean_r=123.68 mean_g=116.779 mean_b=103.939 std_r=58.393 std_g=57.12 std_b=57.375"
declare -A ours theirs
for t in 1 2; do
    "$build/rio_tool" read "$tmp/photos.rec" /dev/null 3 224 224 $t 1 1 32 $aug >/dev/null # warm-up
    ours[$t]=$("$build/rio_tool" read "$tmp/photos.rec" /dev/null 3 224 224 $t 1 $EPOCHS 32 $aug |
               sed -n 's/.*s: \([0-9.]*\) images\/s/\1/p')
done
if [ -x "$py" ]; then
    for t in 1 2; do
        theirs[$t]=$("$py" - "$tmp/photos.rec" $t $EPOCHS 2>"$tmp/mx.log" <<'PY'
import sys, time
import mxnet as mx
rec, threads, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
it = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 224, 224), batch_size=32,
                           random_resized_crop=True, min_random_area=0.08, max_random_area=1.0,
                           min_aspect_ratio=3.0 / 4.0, max_aspect_ratio=4.0 / 3.0,
                           rand_mirror=True, mean_r=123.68, mean_g=116.779, mean_b=103.939,
                           std_r=58.393, std_g=57.12, std_b=57.375, shuffle=True,
                           preprocess_threads=threads, prefetch_buffer=4, round_batch=False)
for b in it:  # warm-up pass
    b.data[0].wait_to_read()
n = 0
t0 = time.time()
for e in range(epochs):
    it.reset()
    for b in it:
        b.data[0].wait_to_read()
        n += b.data[0].shape[0] - b.pad
print('%.1f' % (n / (time.time() - t0)))
PY
)
    done
else
    echo "data.sh: no MXNet environment at $env (make mxnet-env): ours only"
fi
echo "RecordIO pipeline, $RECORDS photos (640x427 JPEG) -> random resized crop 224x224, mirror, normalise, fp32"
for t in 1 2; do
    r=""
    [ -n "${theirs[$t]:-}" ] && r=$(awk -v a="${ours[$t]}" -v b="${theirs[$t]}" 'BEGIN { printf "%.2f", a / b }')
    printf '  %d thread(s): ampc %8s img/s   MXNet ImageRecordIter %8s img/s   ratio %s\n' \
        $t "${ours[$t]:-?}" "${theirs[$t]:-?}" "${r:-?}"
done
