#!/usr/bin/env python3
"""make_npy.py OUT.npy D0,D1,... [--scale X]: writes a float32 NumPy file
(.npy format 1.0, little endian, C order) of that shape, for a program's
--predict.  The values are deterministic, in [0, X) (default 1): a fixed
linear congruential sequence, so a test or a tutorial gets the same file
every time.  Standard library only (no NumPy needed).

    python3 tools/make_npy.py x.npy 4,1,8,8         # four 8x8 digit-shaped inputs
"""
import struct
import sys


def header(shape):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    text = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % dims
    # magic (6) + version (2) + length (2) + text + '\n', padded to 64 bytes
    pad = (-(10 + len(text) + 1)) % 64
    text = text + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] != "--scale"):
        sys.stderr.write(__doc__)
        return 2
    try:
        shape = [int(d) for d in argv[2].split(",")]
        scale = float(argv[4]) if len(argv) == 5 else 1.0
    except ValueError:
        sys.stderr.write("make_npy.py: the shape is integers separated by commas (4,1,8,8)\n")
        return 2
    if not shape or any(d < 1 for d in shape):
        sys.stderr.write("make_npy.py: every dimension must be >= 1\n")
        return 2
    n = 1
    for d in shape:
        n *= d
    state, values = 12345, []
    for _ in range(n):
        state = (state * 1103515245 + 12345) % 2**31
        values.append(scale * state / 2**31)
    with open(argv[1], "wb") as f:
        f.write(header(shape))
        f.write(struct.pack("<%df" % n, *values))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
