#!/usr/bin/env python3
"""Seeds of fuzz_plancache (tests/fuzz/run.sh runs this at fuzz time):

    tests/fuzz/gen_corpus_plancache.py OUTDIR

writes cuDNN plan cache files (runtime/cuda/tune.h): "AMPCPLAN", the format
version, the entry size, the count, the entries (38 little-endian int64s:
the convolution's 24-word key, the 11-word environment, the heuristic list,
the candidate, the engine), an FNV-1a 64 checksum of all before it.  Valid
files of 0, 1 and 3 entries, and the faults the reader names: a bad
checksum, another version, a wrong entry size, a count past the end, a
candidate out of range, a file that is not ours.  Written from the format's
fields, so no binary file is kept in the repository."""
import os
import struct
import sys

MAGIC = b"AMPCPLAN"
WORDS = 24 + 11 + 3


def fnv(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def entry(k, mode=0, candidate=1, engine=7):
    key = [k * 31 + i for i in range(24)]
    env = [9, 0, 132, 91900, 12080, 0, 0, 0, 1 << 30, 64, 0x1234]
    return struct.pack("<%dq" % WORDS, *(key + env + [mode, candidate, engine]))


def cache(entries, version=1, esize=WORDS * 8, count=None, checksum=True):
    body = MAGIC + struct.pack("<IIQ", version, esize, len(entries) if count is None else count)
    body += b"".join(entries)
    h = fnv(body) ^ (0 if checksum else 1)
    return body + struct.pack("<Q", h)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {
        "empty": cache([]),
        "one": cache([entry(1)]),
        "three": cache([entry(1), entry(2, 1, 3, 11), entry(3, 0, 0, 2)]),
        "duplicate": cache([entry(1), entry(1)]),
        "bad_checksum": cache([entry(1)], checksum=False),
        "version2": cache([entry(1)], version=2),
        "entry_size": cache([entry(1)], esize=296),
        "count_past_end": cache([entry(1)], count=5),
        "candidate_range": cache([entry(1, 0, -1)]),
        "not_ours": b"hello, world\n",
        "truncated": cache([entry(1)])[:40],
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
