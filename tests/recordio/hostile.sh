#!/usr/bin/env bash
# hostile.sh - tools/im2rec never destroys, never hangs and packs nothing the
# reader refuses, and the recordio(...) source's option string says what is
# wrong (docs/training.md, RecordIO; make e2e runs it):
#   1. outputs: a FIFO or a device node (mknod, as root) as OUT is refused and
#      stays what it was, no OUT.idx appears beside it; OUT naming the list or
#      an image is refused;
#   2. no blocking: a FIFO as an image or as the list, /dev/zero as the list,
#      each refused at once (under timeout 10); a line over 1 MiB refused;
#   3. what the reader refuses: a text file and an empty file as images,
#      labels nan, inf and 1e40, an index listed twice (both lines named),
#      images outside the root ("..", an absolute path, a symbolic link out of
#      it), allowed by --allow-outside-root; each refusal leaves no OUT, no
#      OUT.idx and no temporary file;
#   4. SIGTERM in the middle of a long list leaves no temporary file;
#   5. recordio(...) through the runtime's main (tests/runtime/model_tiny.c):
#      a bare key, empty items, a repeated key and a third file each named,
#      bounds printed exactly (1048576, not 1.04858e+06), a .idx that is a
#      FIFO refused (never skipped or waited for), and a run without a
#      validation file ends without "Final validation-accuracy=0.000000";
#   6. the decoding budget: a generated 24 MP JPEG decoded at 1/8 for
#      resize=32 within 16 MiB (the crop's geometry checked), refused naming
#      the record without resize, decoded whole within 128 MiB; two threads
#      sharing a budget of one image take turns; --data-decode-mb reaches it.
# The pictures are made by rio_tool photo (never committed).
# usage: hostile.sh BUILD   (BUILD holds im2rec, rio_tool and libampcrt.a)
set -u
build=$(cd "$1" && pwd)
E2E_LOG_LINES=6
. "$(dirname "$0")/../e2e/lib.sh"
im2rec=$build/im2rec rio=$build/rio_tool

mkdir -p "$tmp/img/sub" "$tmp/out"
"$rio" photo 40 30 jpg "$tmp/img/a.jpg" >"$tmp/log" 2>&1 &&
    "$rio" photo 40 30 png "$tmp/img/sub/b.png" >>"$tmp/log" 2>&1 &&
    "$rio" photo 40 30 jpg "$tmp/outside.jpg" >>"$tmp/log" 2>&1 || bad "making the pictures"
printf '0\t1\ta.jpg\n1\t2\tsub/b.png\n' >"$tmp/good.lst"
if "$im2rec" "$tmp/good.lst" "$tmp/img" "$tmp/out/good.rec" >"$tmp/log" 2>&1 &&
   [ -s "$tmp/out/good.rec" ] && [ "$(wc -l <"$tmp/out/good.idx")" = 2 ]; then
    ok "a good list packs 2 records"
else bad "a good list"; fi

# nothing in the output folder but what is expected: no temporary file, no OUT
clean_out() { [ -z "$(ls -A "$tmp/out" | grep -v '^good\.')" ]; }
# refused NAME EXPECTED-MESSAGE im2rec-args...: exit non-zero within 10 s with
# the message, nothing left in $tmp/out
refused() {
    local name=$1 want=$2
    shift 2
    timeout 10 "$im2rec" "$@" >"$tmp/log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- "$want" "$tmp/log" && clean_out; then
        ok "$name: $(head -1 "$tmp/log" | cut -c1-140)"
    else
        bad "$name (exit $rc, wanted '$want')"
        ls -A "$tmp/out" | sed 's/^/    left: /'
    fi
    rm -f "$tmp/out/x.rec" "$tmp/out/x.idx"
}

# ---- 1. outputs ----
mkfifo "$tmp/out/fifo.rec"
refused_fifo() {
    timeout 10 "$im2rec" "$tmp/good.lst" "$tmp/img" "$tmp/out/fifo.rec" >"$tmp/log" 2>&1
    local rc=$?
    if [ $rc = 1 ] && [ -p "$tmp/out/fifo.rec" ] && [ ! -e "$tmp/out/fifo.idx" ] &&
       grep -q "fifo.rec is a FIFO: the output must be a regular file or a new path" "$tmp/log"; then
        ok "a FIFO as OUT is refused: it stays a FIFO, no OUT.idx beside it"
    else bad "a FIFO as OUT (exit $rc)"; fi
}
refused_fifo
rm -f "$tmp/out/fifo.rec"
if [ "$(id -u)" = 0 ]; then
    mknod "$tmp/out/null.rec" c 1 3
    timeout 10 "$im2rec" "$tmp/good.lst" "$tmp/img" "$tmp/out/null.rec" >"$tmp/log" 2>&1
    rc=$?
    if [ $rc = 1 ] && [ -c "$tmp/out/null.rec" ] && [ ! -e "$tmp/out/null.idx" ] &&
       grep -q "null.rec is a character device" "$tmp/log"; then
        ok "a device node as OUT is refused: it stays a device, no OUT.idx beside it"
    else bad "a device node as OUT (exit $rc)"; fi
    rm -f "$tmp/out/null.rec"
else
    echo "NOT RUN the mknod device-as-OUT test (needs root; the FIFO test covers the rule)"
fi
cp "$tmp/good.lst" "$tmp/out/x.rec"
timeout 10 "$im2rec" "$tmp/out/x.rec" "$tmp/img" "$tmp/out/x.rec" >"$tmp/log" 2>&1
[ $? = 2 ] && cmp -s "$tmp/good.lst" "$tmp/out/x.rec" && ok "OUT naming the list is refused, the list intact" ||
    bad "OUT naming the list"
rm -f "$tmp/out/x.rec"
printf '0\t1\t%s\n' "$tmp/out/good.rec" >"$tmp/self.lst"
refused "an image that is the output" "is the output" --allow-outside-root "$tmp/self.lst" "$tmp/img" "$tmp/out/good.rec"

# ---- 2. no blocking ----
mkfifo "$tmp/img/pipe.jpg" "$tmp/pipe.lst"
printf '0\t1\tpipe.jpg\n' >"$tmp/pipe_img.lst"
refused "a FIFO as an image" "image $tmp/img/pipe.jpg: not a regular file (a FIFO)" \
    "$tmp/pipe_img.lst" "$tmp/img" "$tmp/out/x.rec"
refused "a FIFO as the list" "list $tmp/pipe.lst: not a regular file (a FIFO)" \
    "$tmp/pipe.lst" "$tmp/img" "$tmp/out/x.rec"
refused "/dev/zero as the list" "list /dev/zero: not a regular file (a character device)" \
    /dev/zero "$tmp/img" "$tmp/out/x.rec"
python3 -c "import sys; open(sys.argv[1], 'w').write('0\t1\t' + 'a' * (1 << 20) + '.jpg\n')" "$tmp/long.lst"
refused "a line over 1 MiB" "line 1 is longer than 1048576 bytes" "$tmp/long.lst" "$tmp/img" "$tmp/out/x.rec"

# ---- 3. what the reader refuses ----
printf 'just text\n' >"$tmp/img/text.jpg"
: >"$tmp/img/empty.png"
printf '0\t1\ttext.jpg\n' >"$tmp/text.lst"
refused "a text file as an image" "text.jpg (10 bytes) is neither a JPEG nor a PNG file" \
    "$tmp/text.lst" "$tmp/img" "$tmp/out/x.rec"
printf '0\t1\ta.jpg\n1\t1\tempty.png\n' >"$tmp/empty.lst"
refused "an empty file as an image" "line 2: image $tmp/img/empty.png (0 bytes) is neither" \
    "$tmp/empty.lst" "$tmp/img" "$tmp/out/x.rec"
for l in nan inf 1e40 -1e39; do
    printf '0\t%s\ta.jpg\n' "$l" >"$tmp/label.lst"
    refused "label $l" "label 1 '$l' is not a finite float32" "$tmp/label.lst" "$tmp/img" "$tmp/out/x.rec"
done
printf '7\t1\ta.jpg\n8\t1\tsub/b.png\n7\t2\tsub/b.png\n' >"$tmp/dup.lst"
refused "an index listed twice" "line 3: index 7 is already line 1's" "$tmp/dup.lst" "$tmp/img" "$tmp/out/x.rec"
ln -s "$tmp/outside.jpg" "$tmp/img/link.jpg"
for name in ../outside.jpg "$tmp/outside.jpg" link.jpg sub/../../outside.jpg; do
    printf '0\t1\t%s\n' "$name" >"$tmp/out.lst"
    refused "an image outside the root ($name)" "is outside the image root" "$tmp/out.lst" "$tmp/img" "$tmp/out/x.rec"
done
printf '0\t1\t../outside.jpg\n1\t1\tlink.jpg\n' >"$tmp/out.lst"
if "$im2rec" --allow-outside-root "$tmp/out.lst" "$tmp/img" "$tmp/out/x.rec" >"$tmp/log" 2>&1 &&
   [ "$(wc -l <"$tmp/out/x.idx")" = 2 ]; then
    ok "--allow-outside-root packs images outside the root"
else bad "--allow-outside-root"; fi
rm -f "$tmp/out/x.rec" "$tmp/out/x.idx"

# ---- 4. SIGTERM leaves no temporary file ----
python3 -c "
import sys
with open(sys.argv[1], 'w') as f:
    for i in range(400000): f.write('%d\t1\ta.jpg\n' % i)" "$tmp/big.lst"
"$im2rec" "$tmp/big.lst" "$tmp/img" "$tmp/out/x.rec" >"$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 1 500); do # until its temporary files exist
    ls "$tmp/out" | grep -q '\.tmp\.' && break
    sleep 0.01
done
kill -TERM "$pid" 2>/dev/null
wait "$pid"
rc=$?
if [ $rc = 143 ] && clean_out; then
    ok "SIGTERM in the middle of a 400,000-line list: no temporary file left"
else
    bad "SIGTERM (exit $rc; 143 expected: the run had ended before the signal?)"
    ls -A "$tmp/out" | sed 's/^/    left: /'
fi

# ---- 5. the recordio(...) option string ----
# with $CC and $CFLAGS, as the runtime was built (a sanitizer build's needs them)
# shellcheck disable=SC2086
${CC:-cc} ${CFLAGS:-} -std=c11 -D_GNU_SOURCE -Iruntime tests/runtime/model_tiny.c "$build/libampcrt.a" \
    -lopenblas -lz -lm -o "$tmp/tiny" >"$tmp/log" 2>&1 || bad "building the tiny program"
"$rio" photo 8 8 png "$tmp/img/p8.png" >"$tmp/log" 2>&1 || bad "an 8x8 picture"
printf '0\t1\tp8.png\n1\t0\tp8.png\n2\t1\tp8.png\n3\t0\tp8.png\n' >"$tmp/p8.lst"
"$im2rec" "$tmp/p8.lst" "$tmp/img" "$tmp/p8.rec" >"$tmp/log" 2>&1 || bad "packing p8.rec"
option() { # NAME EXIT MESSAGE DATA [FLAGS]: the tiny program exits EXIT with MESSAGE
    timeout 20 "$tmp/tiny" --data "$4" --batch-size 2 --max-steps 1 --log-interval 0 "${@:5}" >"$tmp/log" 2>&1
    local rc=$?
    if [ $rc = "$2" ] && grep -qF -- "$3" "$tmp/log"; then ok "recordio(): $1: $(grep -F -- "$3" "$tmp/log" | head -1 | cut -c1-140)"
    else bad "recordio(): $1 (exit $rc, wanted $2 and '$3')"; fi
}
r=$tmp/p8.rec
option "a bare key in the validation file's place" 2 "'resize' is an option without a value (write resize=VALUE)" "recordio($r, resize)"
option "a bare key after the files" 2 "'resize': recordio() takes two files (TRAIN.rec, VAL.rec), then options as KEY=VALUE" "recordio($r, $r, resize)"
option "an empty item" 2 "an empty item (nothing between two commas)" "recordio($r,, resize=8)"
option "a trailing comma" 2 "an empty item (a comma before ')')" "recordio($r, resize=8, )"
option "a repeated key" 2 "recordio() option 'resize' given twice" "recordio($r, resize=8, resize=9)"
option "bounds printed exactly" 2 "num_parts=2000000 is not an integer in [1, 1048576]" "recordio($r, num_parts=2000000)"
option "no validation file" 0 "Final validation: none (the data source has no validation set)" "recordio($r)"
grep -qi "validation-" "$tmp/log" && bad "a run without a validation file prints an accuracy of 0"
cp "$r" "$tmp/q.rec" && mkfifo "$tmp/q.idx"
option "a .idx that is a FIFO" 1 "the RecordIO index $tmp/q.idx: not a regular file (a FIFO)" "recordio($tmp/q.rec)"

# ---- 6. the decoding budget (--data-decode-mb) and JPEG's DCT scaling ----
# a 24 MP photograph (6000x4000 JPEG, made here): with resize=32 it decodes at
# 1/8 (750x500, 1.1 MiB) within a 16 MiB budget, and the crop's geometry is
# the file's (MXNet's resize from 6000x4000: 48x32, centred 32x32; the red
# channel is 255 x / 6000 and the green 255 y / 4000 in the picture);
# without resize it needs 68.7 MiB: refused naming the record, or decoded
# whole within 128 MiB; two threads and a budget that holds one 2000x1500 PNG
# at a time take turns rather than fail
"$rio" photo 6000 4000 jpg "$tmp/img/big.jpg" >"$tmp/log" 2>&1 &&
    "$rio" photo 2000 1500 png "$tmp/img/mid.png" >>"$tmp/log" 2>&1 || bad "the large pictures"
printf '0\t1\tbig.jpg\n1\t2\tbig.jpg\n' >"$tmp/big.lst"
printf '0\t1\tmid.png\n1\t2\tmid.png\n2\t1\tmid.png\n3\t0\tmid.png\n' >"$tmp/mid.lst"
"$im2rec" "$tmp/big.lst" "$tmp/img" "$tmp/big.rec" >"$tmp/log" 2>&1 &&
    "$im2rec" "$tmp/mid.lst" "$tmp/img" "$tmp/mid.rec" >>"$tmp/log" 2>&1 || bad "packing the large pictures"
if "$rio" read "$tmp/big.rec" "$tmp/big.out" 3 32 32 2 1 0 2 resize=32 decode_mb=16 >"$tmp/log" 2>&1 &&
   python3 - "$tmp/big.out" <<'EOF2'
import array, sys
a = array.array('f'); a.frombytes(open(sys.argv[1], 'rb').read()[:3 * 32 * 32 * 4])
er = max(abs(a[16 * 32 + x] - 255 * (x + 8.5) / 48) for x in range(32))
eg = max(abs(a[1024 + y * 32 + 16] - 255 * (y + 0.5) / 32) for y in range(32))
sys.exit(0 if er <= 3 and eg <= 3 else 1)
EOF2
then ok "a 24 MP JPEG with resize=32 decodes at 1/8 within 16 MiB, the crop where MXNet puts it (within 3 levels)"
else bad "a 24 MP JPEG with resize=32 in 16 MiB"; fi
"$rio" read "$tmp/big.rec" "$tmp/big2.out" 3 32 32 2 1 0 2 decode_mb=16 >"$tmp/log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "big.rec: byte offset [0-9]*: record [01] (id [01]): decoding this 6000x4000 image needs 68.7 MiB (decoded 6000x4000), more than the 16 MiB all decoding threads share (--data-decode-mb)" "$tmp/log"; then
    ok "an image larger than the whole budget stops the run naming the record"
else bad "an image above the budget (exit $rc)"; fi
"$rio" read "$tmp/big.rec" "$tmp/big3.out" 3 32 32 2 1 0 2 decode_mb=128 >"$tmp/log" 2>&1 &&
    ok "the 24 MP JPEG decoded whole within 128 MiB" || bad "the 24 MP JPEG whole in 128 MiB"
"$rio" read "$tmp/mid.rec" "$tmp/mid.out" 3 32 32 2 1 0 2 decode_mb=12 >"$tmp/log" 2>&1 &&
    grep -q "2 decoding threads sharing 12 MiB" "$tmp/log" &&
    ok "two threads, a budget of one 2000x1500 image: they take turns, 4 images read" ||
    bad "two threads sharing a budget of one image"
option "--data-decode-mb through the program" 0 "decoding threads sharing 16 MiB" \
    "recordio($tmp/big.rec, resize=8)" --data-decode-mb 16
echo "recordio/hostile: $pass passed, $fail failed"
[ $fail -eq 0 ]
