"""mxnet_compare.py - MXNet 1.9.1's RecordIO against tools/im2rec (run by
tests/recordio/run.sh in the MXNet environment, make mxnet-env).

  python mxnet_compare.py LIST ROOT OURS.rec MXNET.rec [--pack-label]

Writes MXNET.rec/.idx from LIST as im2rec.py --pass-through does
(mx.recordio.MXIndexedRecordIO.write_idx(index, mx.recordio.pack(IRHeader(0,
label(s), index, 0), image bytes))), then checks: both .rec and both .idx
byte-identical, and MXNet reads every record of OURS back (read_idx and
unpack) to the header and image bytes of the list.  Exit 1 with the first
difference."""
import os
import sys

import mxnet as mx
import numpy as np


def read_list(path):
    items = []
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.strip().split('\t')]
            if len(parts) < 3:
                continue
            items.append((int(parts[0]), [float(x) for x in parts[1:-1]], parts[-1]))
    return items


def main():
    lst, root, ours, theirs = sys.argv[1:5]
    pack = '--pack-label' in sys.argv[5:]
    items = read_list(lst)
    base = os.path.splitext(theirs)[0]
    rec = mx.recordio.MXIndexedRecordIO(base + '.idx', theirs, 'w')
    for index, labels, name in items:
        with open(os.path.join(root, name), 'rb') as f:
            img = f.read()
        label = labels if pack and len(labels) > 1 else labels[0]
        rec.write_idx(index, mx.recordio.pack(mx.recordio.IRHeader(0, label, index, 0), img))
    rec.close()
    obase = os.path.splitext(ours)[0]
    for a, b in ((ours, theirs), (obase + '.idx', base + '.idx')):
        x, y = open(a, 'rb').read(), open(b, 'rb').read()
        if x != y:
            at = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))
            print('mxnet_compare: %s and %s differ at byte %d (sizes %d, %d)' % (a, b, at, len(x), len(y)))
            return 1
    r = mx.recordio.MXIndexedRecordIO(obase + '.idx', ours, 'r')
    for index, labels, name in items:
        header, img = mx.recordio.unpack(r.read_idx(index))
        with open(os.path.join(root, name), 'rb') as f:
            want = f.read()
        lab = np.asarray(header.label, dtype=np.float32).ravel()
        exp = np.asarray(labels if pack and len(labels) > 1 else labels[:1], dtype=np.float32)
        if img != want or header.id != index or header.id2 != 0 or not np.array_equal(lab, exp):
            print('mxnet_compare: record %d of %s reads back wrong in MXNet' % (index, ours))
            return 1
    r.close()
    print('mxnet_compare: %s: %d records byte-identical to MXNet %s\'s, read back by MXNet'
          % (ours, len(items), mx.__version__))
    return 0


if __name__ == '__main__':
    sys.exit(main())
