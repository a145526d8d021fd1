#!/usr/bin/env bash
# run.sh - the recordio data source end to end (docs/training.md, RecordIO;
# make e2e runs it):
#   1. round trip: Fashion-MNIST images written as PNG and JPEG files
#      (rio_tool), packed by tools/im2rec, read back by the runtime's
#      source: PNG pixel-identical; JPEG (quality 90, 28x28 grey) within
#      mean |d| <= 2.5 and max |d| <= 32 grey levels (JPEG's own loss, not
#      the reader's); a record split twice by the magic identical too;
#   2. determinism: 2 epochs with resize, random resized crop, mirror and
#      normalisation on 1 and 3 decoding threads give the same bytes; another
#      seed gives others; num_parts=2 gives two disjoint equal parts;
#   3. corrupt files, each exit 1 with its message and byte offset (and,
#      through the program, a label above the model's classes);
#   4. training: fashion_cnn, one epoch on 6,000 training and 1,000 test
#      images from a .rec (PNG) and from IDX files of the same images reaches
#      the same test accuracy within 1 point (the same shuffle; the inputs
#      differ by at most one rounding).
# Fashion-MNIST missing: SKIPPED, or a failure with AMPC_REQUIRE_FASHION=1.
# usage: run.sh BUILD DATA_DIR   (BUILD holds ampc, im2rec and rio_tool)
set -u
build=$(cd "$1" && pwd)
data=$2
E2E_LOG_LINES=8
. "$(dirname "$0")/../e2e/lib.sh"
start=$(date +%s)
im2rec=$build/im2rec rio=$build/rio_tool ampc=$build/ampc

dir=""
for d in "$data/fashion-mnist" /usr/share/datasets/fashion-mnist; do
    [ -s "$d/train-images-idx3-ubyte.gz" ] && { dir=$d; break; }
done
if [ -z "$dir" ]; then
    if [ "${AMPC_REQUIRE_FASHION:-0}" = 1 ]; then
        echo "FAIL recordio: Fashion-MNIST (.gz) not found (AMPC_REQUIRE_FASHION=1)"; exit 1
    fi
    echo "SKIPPED: recordio: Fashion-MNIST not found in $data/fashion-mnist or /usr/share/datasets/fashion-mnist (apt-get install dataset-fashion-mnist)"
    exit 0
fi

# ---- 1. round trip ----
mkdir -p "$tmp/img"
"$rio" images "$dir/train-images-idx3-ubyte.gz" "$dir/train-labels-idx1-ubyte.gz" 200 "$tmp/img" \
    >"$tmp/log" 2>&1 || bad "writing the test images"
for k in png jpg magic; do
    "$im2rec" "$tmp/img/$k.lst" "$tmp/img" "$tmp/$k.rec" >"$tmp/log" 2>&1 || bad "im2rec $k.lst"
done
# reads: REC OUT C H W THREADS SEED EPOCHS BATCH [options]; EPOCHS 0: file order
compare() { # OUT N MAXTOL MEANTOL: the floats of OUT (batches of 20) against pixels.bin
    python3 - "$tmp/$1" "$tmp/img/pixels.bin" "$2" "$3" "$4" <<'EOF'
import array, sys
out, pix, n, maxtol, meantol = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
b = min(n, 20)
raw = open(out, 'rb').read()
x = array.array('f'); per = b * 784 * 4 + b * 4
for k in range(n // b):
    x.frombytes(raw[k * per:k * per + b * 784 * 4])
p = open(pix, 'rb').read()[:len(x)]
d = [abs(a - c) for a, c in zip(x, p)]
m = max(d); mean = sum(d) / len(d)
print('%d values: max |d| %g, mean |d| %.3f' % (len(d), m, mean))
sys.exit(0 if len(d) == n * 784 and m <= maxtol and mean <= meantol else 1)
EOF
}
"$rio" read "$tmp/png.rec" "$tmp/png.out" 1 28 28 2 1 0 20 >"$tmp/log" 2>&1 &&
    r=$(compare png.out 200 0 0) && ok "PNG round trip, 200 images pixel-identical ($r)" || bad "PNG round trip ($r)"
"$rio" read "$tmp/jpg.rec" "$tmp/jpg.out" 1 28 28 2 1 0 20 >"$tmp/log" 2>&1 &&
    r=$(compare jpg.out 200 32 2.5) && ok "JPEG round trip, quality 90 ($r)" || bad "JPEG round trip ($r)"
"$rio" read "$tmp/magic.rec" "$tmp/magic.out" 1 28 28 1 1 0 1 >"$tmp/log" 2>&1 &&
    r=$(compare magic.out 1 0 0) && [ "$(od -A n -t x4 -N 8 -j 0 "$tmp/magic.rec" | tr -d ' ')" = ced7230a20000008 ] &&
    ok "a record split twice by the magic (flags 1, 2, 3) reads back pixel-identical" || bad "split record"

# ---- 2. determinism and parts ----
aug="resize=32 random_resized_crop=1 rand_mirror=1 mean_r=72.9 std_r=90.0 prefetch=2"
for t in 1 3; do
    "$rio" read "$tmp/jpg.rec" "$tmp/det$t" 1 24 24 $t 7 2 16 $aug >"$tmp/log" 2>&1 || bad "augmented read, $t threads"
done
"$rio" read "$tmp/jpg.rec" "$tmp/det8" 1 24 24 3 8 2 16 $aug >"$tmp/log" 2>&1
if cmp -s "$tmp/det1" "$tmp/det3" && [ -s "$tmp/det1" ] && ! cmp -s "$tmp/det1" "$tmp/det8"; then
    ok "augmented batches (2 epochs) identical on 1 and 3 threads, different with another seed"
else bad "determinism across thread counts"; fi
"$rio" read "$tmp/png.rec" "$tmp/crop" 1 24 24 2 7 1 20 rand_crop=1 rand_mirror=1 >"$tmp/log" 2>&1 &&
    ! cmp -s "$tmp/crop" "$tmp/png.out" && ok "rand_crop, rand_mirror" || bad "rand_crop"
for p in 0 1; do
    "$rio" read "$tmp/png.rec" "$tmp/part$p" 1 28 28 2 1 0 20 num_parts=3 part_index=$p >"$tmp/log" 2>&1 ||
        bad "num_parts=3 part_index=$p"
    grep -q "part $((p+1)) of 3: 66)" "$tmp/log" || bad "part $p's size"
done
python3 - "$tmp/png.out" "$tmp/part0" "$tmp/part1" <<'EOF' && ok "num_parts=3: parts of 66 records each (200 = 3 x 66 + 2 left out), contiguous and disjoint" || bad "parts"
import sys
a, p0, p1 = (open(f, 'rb').read() for f in sys.argv[1:4])
per = 20 * 784 * 4 + 20 * 4
# 66 records: 3 batches of 20; part 0 starts at record 0, part 1 at record 66
sys.exit(0 if p0 == a[:3 * per] and len(p1) == 3 * per and p1 != p0 else 1)
EOF

# ---- 3. corrupt files ----
corrupt() { # NAME FILE WANT: reading FILE fails with exit 1 and a message matching WANT
    "$rio" read "$2" "$tmp/c.out" 1 28 28 2 1 0 1 >"$tmp/log" 2>&1
    local rc=$?
    if [ $rc -eq 1 ] && grep -Eq "$3" "$tmp/log"; then ok "corrupt: $1: $(grep -m1 'rio_tool:' "$tmp/log" | cut -c1-150)"
    else bad "corrupt: $1 (rc $rc, wanted /$3/)"; fi
}
head -c 600 "$tmp/magic.rec" >"$tmp/trunc.rec"
corrupt "truncated" "$tmp/trunc.rec" "byte offset 16: a record part of 600 bytes runs past the end"
head -c 5 "$tmp/png.rec" >"$tmp/short.rec"
corrupt "a header cut short" "$tmp/short.rec" "byte offset 0: truncated: a record header needs 8 bytes"
python3 -c "
import sys; d = bytearray(open(sys.argv[1], 'rb').read()); d[620] ^= 0xff; open(sys.argv[2], 'wb').write(d)" "$tmp/png.rec" "$tmp/magic_bad.rec"
corrupt "wrong magic (second record)" "$tmp/magic_bad.rec" "byte offset 620: bad magic 0xced723f5"
python3 -c "
import sys, struct; d = bytearray(open(sys.argv[1], 'rb').read()); d[4:8] = struct.pack('<I', 0x1fffffff); open(sys.argv[2], 'wb').write(d)" "$tmp/png.rec" "$tmp/len.rec"
corrupt "a length past the end" "$tmp/len.rec" "byte offset 0: a record part of 536870911 bytes runs past the end"
python3 -c "
import sys, struct; d = bytearray(open(sys.argv[1], 'rb').read()); d[4:8] = struct.pack('<I', 2 << 29 | struct.unpack('<I', d[4:8])[0]); open(sys.argv[2], 'wb').write(d)" "$tmp/png.rec" "$tmp/flag.rec"
corrupt "a record starting with continuation flag 2" "$tmp/flag.rec" "byte offset 4: continuation flag 2 where a record starts"
# (im2rec refuses such an image: the record is written here)
python3 -c "
import struct, sys
d = struct.pack('<IfQQ', 0, 1.0, 0, 0) + b'not an image at all\n'
open(sys.argv[1], 'wb').write(struct.pack('<II', 0xced7230a, len(d)) + d + bytes(-len(d) % 4))" "$tmp/text.rec"
corrupt "a payload that is no image" "$tmp/text.rec" "record 0: its image \(20 bytes\) is neither a JPEG nor a PNG"
head -c 200 "$tmp/img/jpg/0.jpg" >"$tmp/img/cut.jpg"
printf '0\t1\tcut.jpg\n' >"$tmp/cut.lst"
"$im2rec" "$tmp/cut.lst" "$tmp/img" "$tmp/cut.rec" >/dev/null 2>&1
corrupt "a JPEG that fails to decode" "$tmp/cut.rec" "cut.rec: byte offset 0: record 0 \(id 0\): JPEG: "
cp "$tmp/png.rec" "$tmp/idxbad.rec"
printf '0\t0\n1\t621\n' >"$tmp/idxbad.idx"
corrupt "a .idx naming no record" "$tmp/idxbad.rec" "idxbad.idx: line 2: offset 621 is not where a record"

# ---- 4. training from a .rec and from IDX files of the same images ----
mkdir -p "$tmp/tr" "$tmp/va"
"$rio" images "$dir/train-images-idx3-ubyte.gz" "$dir/train-labels-idx1-ubyte.gz" 6000 "$tmp/tr" >"$tmp/log" 2>&1 &&
"$rio" images "$dir/t10k-images-idx3-ubyte.gz" "$dir/t10k-labels-idx1-ubyte.gz" 1000 "$tmp/va" >>"$tmp/log" 2>&1 &&
"$im2rec" "$tmp/tr/png.lst" "$tmp/tr" "$tmp/train.rec" >>"$tmp/log" 2>&1 &&
"$im2rec" "$tmp/va/png.lst" "$tmp/va" "$tmp/val.rec" >>"$tmp/log" 2>&1 || bad "making the training .rec files"
python3 - "$dir" "$tmp" <<'EOF' || bad "IDX subsets"
import gzip, struct, sys
d, t = sys.argv[1], sys.argv[2]
for src, n, dst in (('train', 6000, 'tr'), ('t10k', 1000, 'va')):
    im = gzip.open('%s/%s-images-idx3-ubyte.gz' % (d, src)).read()
    lb = gzip.open('%s/%s-labels-idx1-ubyte.gz' % (d, src)).read()
    open('%s/%s.images' % (t, dst), 'wb').write(struct.pack('>IIII', 0x803, n, 28, 28) + im[16:16 + n * 784])
    open('%s/%s.labels' % (t, dst), 'wb').write(struct.pack('>II', 0x801, n) + lb[8:8 + n])
EOF
"$ampc" examples/fashion_cnn.sym -o "$tmp/fashion" >"$tmp/log" 2>&1 || bad "compiling fashion_cnn"
run_acc() { "$tmp/fashion" --data "$1" --epochs 1 --seed 3 --log-interval 0 --data-threads 2 >"$tmp/log" 2>&1 &&
    sed -n 's/^Final validation-accuracy=//p' "$tmp/log"; }
a_rec=$(run_acc "recordio(\"$tmp/train.rec\", \"$tmp/val.rec\", scale=0.00392156862745098)")
grep -q "^Data: RecordIO .*train.rec: 6000 records" "$tmp/log" || bad "the RecordIO start line"
a_idx=$(run_acc "idx(\"$tmp/tr.images\", \"$tmp/tr.labels\", \"$tmp/va.images\", \"$tmp/va.labels\")")
if [ -n "$a_rec" ] && [ -n "$a_idx" ] &&
   awk -v a="$a_rec" -v b="$a_idx" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a >= 0.4 && d <= 0.01) }'; then
    ok "fashion_cnn, 1 epoch of 6,000 images: test accuracy from .rec $a_rec, from IDX $a_idx (within 1 point)"
else bad "training from .rec ($a_rec) against IDX ($a_idx)"; fi
"$tmp/fashion" --data "recordio(\"$tmp/train.rec\", \"$tmp/val.rec\", colour=1)" --max-steps 0 >"$tmp/log" 2>&1
[ $? -eq 2 ] && grep -q "recordio() has no option 'colour'" "$tmp/log" && ok "an unknown recordio() option: exit 2 naming it" || bad "unknown option"
"$tmp/fashion" --data "recordio(\"$tmp/train.rec\", \"$tmp/val.rec\", resize=0x10)" --max-steps 0 >"$tmp/log" 2>&1
[ $? -eq 2 ] && grep -q "resize=0x10 is not an integer" "$tmp/log" && ok "resize=0x10: the number grammar is decimal (exit 2)" || bad "resize=0x10 accepted"

printf '0\t12\tpng/0.png\n' >"$tmp/label.lst"
"$im2rec" "$tmp/label.lst" "$tmp/img" "$tmp/label.rec" >/dev/null 2>&1
"$tmp/fashion" --data "recordio(\"$tmp/label.rec\")" --max-steps 0 >"$tmp/log" 2>&1
[ $? -eq 1 ] && grep -q "label.rec: byte offset 0: record 0: label 12 is not a class 0..9 of the model" "$tmp/log" &&
    ok "a label above the model's classes: exit 1 naming the record" || bad "label out of range"
"$tmp/fashion" --data "recordio(val=\"$tmp/val.rec\")" --max-steps 0 >"$tmp/log" 2>&1
[ $? -eq 2 ] && grep -q "recordio() needs the training file" "$tmp/log" && ok "recordio() without a training file: exit 2" ||
    bad "recordio() without a training file"
"$tmp/fashion" --data "recordio(train=\"$tmp/val.rec\", val=\"$tmp/train.rec\", rand_mirror=1)" --max-steps 0 >"$tmp/log" 2>&1
[ $? -eq 0 ] && grep -q "data recordio: 1000 training and 6000 validation samples" "$tmp/log" &&
    ok "recordio(train=..., val=..., option): named files" || bad "named recordio() files"
echo "recordio: $pass passed, $fail failed ($(( $(date +%s) - start )) s)"
[ $fail -eq 0 ]
