#!/usr/bin/env python3
"""Seeds of fuzz_mxparams (tests/fuzz/run.sh runs this at fuzz time):

    tests/fuzz/gen_corpus_mxparams.py OUTDIR

writes small MXNet NDArray-list files (docs/mxnet.md, "The .params
format"): every array header version (legacy, V1, V2, V3), the dtypes read
and two refused, named and unnamed lists, and the malformations the reader
must refuse (wrong list magic, a rank or dimensions past any size, a name
count that disagrees, data cut short).  Written from the format's fields,
so no binary file is kept in the repository."""
import os
import struct
import sys

LIST_MAGIC = 0x112
V1, V2, V3 = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
F32, F64, F16, I32 = 0, 1, 2, 4
CPU = (1, 0)  # dev_type, dev_id


def values(flag, n, seed):
    vals = [((seed * 7919 + i * 104729) % 2000 - 1000) / 613.0 for i in range(n)]
    if flag == F32:
        return struct.pack("<%df" % n, *vals)
    if flag == F64:
        return struct.pack("<%dd" % n, *vals)
    if flag == F16:
        return struct.pack("<%de" % n, *vals)
    return struct.pack("<%di" % n, *[int(v * 10) for v in vals])


def count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def array(shape, flag=F32, magic=V2, seed=1, data=None):
    """One NDArray: V2/V3 (magic, storage type 0, i64 dims), V1 (magic, i64
    dims) or legacy (magic=None: u32 rank, u32 dims), then the context, the
    type flag and the data."""
    if magic is None:
        head = struct.pack("<I", len(shape)) + struct.pack("<%dI" % len(shape), *shape)
    elif magic == V1:
        head = struct.pack("<II", V1, len(shape)) + struct.pack("<%dq" % len(shape), *shape)
    else:
        head = struct.pack("<IiI", magic, 0, len(shape)) + struct.pack("<%dq" % len(shape), *shape)
    if data is None:
        data = values(flag, count(shape), seed)
    return head + struct.pack("<ii", *CPU) + struct.pack("<i", flag) + data


def names(ns):
    out = struct.pack("<Q", len(ns))
    for n in ns:
        b = n.encode()
        out += struct.pack("<Q", len(b)) + b
    return out


def file(arrays, ns, magic=LIST_MAGIC, count_arrays=None):
    k = len(arrays) if count_arrays is None else count_arrays
    return struct.pack("<QQQ", magic, 0, k) + b"".join(arrays) + names(ns)


def seeds():
    fc1 = [array([3, 4], seed=1), array([3], seed=2), array([2], seed=3)]
    named = ["arg:fc1_weight", "arg:fc1_bias", "aux:bn_moving_var"]
    yield "v2_named_f32", file(fc1, named)
    yield "wrong_magic", file(fc1, named, magic=LIST_MAGIC + 1)
    yield "v2_unnamed_list", file([array([2, 2], seed=4)], [])
    yield "v2_f16", file([array([2, 3], F16, seed=5)], ["arg:w"])
    yield "v3_np_shape", file([array([2, 2], magic=V3, seed=6)], ["w"])
    yield "v1_header", file([array([2, 2], magic=V1, seed=7)], ["arg:w"])
    yield "legacy_header", file([array([3], magic=None, seed=8)], ["w"])
    yield "v2_float64_refused", file([array([3], F64, seed=9)], ["w"])
    yield "v2_int32_refused", file([array([3], I32, seed=10)], ["w"])
    # names: two for one array
    yield "names_count_mismatch", file([array([1], magic=V1, seed=11)], ["a", "b"])
    # dimensions whose product passes any size; no data follows
    yield "huge_dims", file([array([256, (1 << 32) + 256], data=b"")], ["w"])
    # a legacy rank of 2^31 - 1, then junk
    yield "huge_rank_legacy", (struct.pack("<QQQ", LIST_MAGIC, 0, 1) +
                               struct.pack("<II", 0x7FFFFFFF, 1) + names(["w"]))
    # three arrays announced, the first cut short in its data
    yield "truncated_in_data", file([array([3, 4])[:-44]], [], count_arrays=3)[:-8]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_corpus_mxparams.py OUTDIR")
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(sys.argv[1], name + ".params"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
