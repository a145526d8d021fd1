#!/usr/bin/env python3
"""Seeds of fuzz_npy (tests/fuzz/run.sh runs this at fuzz time):

    tests/fuzz/gen_corpus_npy.py OUTDIR

writes small NumPy .npy files (docs/mxnet.md, "The .npy format"): format
versions 1.0 and 2.0, the shapes the reader takes (a scalar, 2-D, 4-D), the
two it refuses (float64, Fortran order), a header that is not a dict literal
and data cut short.  Written from the format's fields, so no binary file is
kept in the repository."""
import os
import struct
import sys

MAGIC = b"\x93NUMPY"


def values(n, seed=1):
    return [((seed * 7919 + i * 104729) % 2000 - 1000) / 613.0 for i in range(n)]


def npy(header, data, major=1):
    """The magic, the version, the header padded with spaces and ended by a
    newline so that the data start at a multiple of 64 bytes."""
    lenfmt = "<H" if major == 1 else "<I"
    prefix = len(MAGIC) + 2 + struct.calcsize(lenfmt)
    text = header.encode("latin1")
    pad = (64 - (prefix + len(text) + 1) % 64) % 64
    text += b" " * pad + b"\n"
    return MAGIC + bytes([major, 0]) + struct.pack(lenfmt, len(text)) + text + data


def dict_header(descr, shape, fortran=False):
    dims = "".join("%d, " % d for d in shape) if len(shape) == 1 else ", ".join(map(str, shape))
    return "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
        descr, "True" if fortran else "False", dims)


def f4(shape):
    n = 1
    for d in shape:
        n *= d
    return struct.pack("<%df" % n, *values(n))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {
        "v1_f4_scalar.npy": npy(dict_header("<f4", ()), f4(())),
        "v1_f4_2d.npy": npy(dict_header("<f4", (3, 4)), f4((3, 4))),
        "v1_f4_4d.npy": npy(dict_header("<f4", (2, 1, 2, 2)), f4((2, 1, 2, 2))),
        "v2_f4.npy": npy(dict_header("<f4", (2, 3)), f4((2, 3)), major=2),
        "v1_f8_refused.npy": npy(dict_header("<f8", (2, 2)),
                                 struct.pack("<4d", *values(4))),
        "v1_fortran_refused.npy": npy(dict_header("<f4", (3, 2), fortran=True), f4((3, 2))),
        # a shape tuple without its comma, and no fortran_order key
        "bad_header.npy": npy("{'descr': '<f4', 'shape': (3 4), }", f4((3, 4))),
        "truncated.npy": npy(dict_header("<f4", (3, 4)), f4((3, 4)))[:-5],
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
