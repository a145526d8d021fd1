#!/usr/bin/env python3
"""Seeds of fuzz_recordio (tests/fuzz/run.sh runs this at fuzz time):

    tests/fuzz/gen_corpus_recordio.py OUTDIR

writes small MXNet RecordIO files (docs/training.md, "RecordIO"): records
holding PNG and JPEG images, a record with several labels, a record split by
the magic once and one split twice (first, middle and last parts), and a file
cut inside a part.  The images are written here from their formats' fields
(PNG: zlib-compressed rows; JPEG: a baseline greyscale file of flat 8x8
blocks, DC coefficients only), so no binary file is kept in the repository."""
import os
import struct
import sys
import zlib

MAGIC = 0xCED7230A


# ---- images ---------------------------------------------------------------

def png(width, height, seed):
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + bytes((x * 9 + y * 5 + seed * 31) & 0xFF for x in range(width))
                    for y in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) +
            chunk(b"IEND", b""))


def huffman_codes(bits, vals):
    """Canonical codes (JPEG Annex C): symbol -> (code, length)."""
    codes, code, k = {}, 0, 0
    for length in range(1, 17):
        for _ in range(bits[length - 1]):
            codes[vals[k]] = (code, length)
            code, k = code + 1, k + 1
        code <<= 1
    return codes


# the luminance DC table of the JPEG standard (Annex K.3); AC: only EOB
DC_BITS = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
DC_VALS = list(range(12))
AC_BITS = [1] + [0] * 15
AC_VALS = [0x00]


def jpeg(levels, bw, bh):
    """A baseline greyscale JPEG of bw x bh flat 8x8 blocks of the given grey
    levels (row major).  Quantiser 8 for DC: a flat block of value v has DC
    coefficient 8 (v - 128), so its quantised DC is v - 128."""
    def segment(marker, payload):
        return struct.pack(">BBH", 0xFF, marker, len(payload) + 2) + payload
    dqt = bytes([0, 8] + [1] * 63)
    sof = struct.pack(">BHHB", 8, bh * 8, bw * 8, 1) + bytes([1, 0x11, 0])
    dht = (bytes([0x00] + DC_BITS + DC_VALS) + bytes([0x10] + AC_BITS + AC_VALS))
    sos = bytes([1, 1, 0x00, 0, 63, 0])
    dc, ac = huffman_codes(DC_BITS, DC_VALS), huffman_codes(AC_BITS, AC_VALS)
    bits, prev = [], 0
    for v in levels:
        diff, prev = (v - 128) - prev, v - 128
        cat = abs(diff).bit_length()
        code, n = dc[cat]
        bits += [(code >> (n - 1 - i)) & 1 for i in range(n)]
        extra = diff if diff >= 0 else diff + (1 << cat) - 1
        bits += [(extra >> (cat - 1 - i)) & 1 for i in range(cat)]
        code, n = ac[0x00]  # end of block: every AC coefficient is 0
        bits += [(code >> (n - 1 - i)) & 1 for i in range(n)]
    bits += [1] * (-len(bits) % 8)
    scan = bytearray()
    for i in range(0, len(bits), 8):
        byte = int("".join(map(str, bits[i:i + 8])), 2)
        scan += bytes([byte]) + (b"\x00" if byte == 0xFF else b"")
    return (b"\xFF\xD8" + segment(0xDB, dqt) + segment(0xC0, sof) + segment(0xC4, dht) +
            segment(0xDA, sos) + bytes(scan) + b"\xFF\xD9")


# ---- records --------------------------------------------------------------

def irheader(label, ident, labels=()):
    head = struct.pack("<IfQQ", len(labels), 0.0 if labels else label, ident, 0)
    return head + struct.pack("<%df" % len(labels), *labels)


def part(cflag, data):
    return (struct.pack("<II", MAGIC, (cflag << 29) | len(data)) + data +
            b"\x00" * (-len(data) % 4))


def record(data):
    """The writer's rule: split wherever the data hold the magic at an offset
    that is a multiple of 4, dropping those 4 bytes (flags 1, 2, 3)."""
    pieces, start = [], 0
    for off in range(0, len(data) - 3, 4):
        if struct.unpack_from("<I", data, off)[0] == MAGIC:
            pieces.append(data[start:off])
            start = off + 4
    pieces.append(data[start:])
    if len(pieces) == 1:
        return part(0, data)
    return b"".join(part(1 if i == 0 else 3 if i == len(pieces) - 1 else 2, p)
                    for i, p in enumerate(pieces))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    split_once = record(irheader(9.0, MAGIC) + png(28, 28, 1))
    seeds = {
        "two_jpeg.rec": (record(irheader(9.0, 0) + jpeg([40, 90, 160, 220], 2, 2)) +
                         record(irheader(3.0, 1) + jpeg([128, 60, 250, 10, 77, 140], 3, 2))),
        "png.rec": record(irheader(1.0, 0) + png(28, 28, 2)),
        "multi_label.rec": record(irheader(0.0, 5, (1.0, 2.5, 3.0)) + png(28, 28, 3)),
        # the id is the magic: one split, the magic put back by the reader
        "split_magic.rec": split_once + record(irheader(4.0, 7) + png(28, 28, 4)),
        # the id and id2 both the magic: first, middle and last parts
        "split_twice.rec": record(struct.pack("<IfII", 0, 2.0, MAGIC, 0) +
                                  struct.pack("<II", MAGIC, 0) + png(16, 16, 5)),
        "truncated.rec": split_once[:len(split_once) // 2],
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
