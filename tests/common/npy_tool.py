#!/usr/bin/env python3
"""Small .npy helpers for the command-line tests of --dump and --load (standard library only;
NumPy is used to compare arrays when it is installed).

  npy_tool.py same A.npy B.npy            exit 0 when both hold the same array
  npy_tool.py widen SRC.npy DST.npy       float32 SRC written again as float64 (exact)
  npy_tool.py write DST.npy DESCR SHAPE FILL [--fortran]
                                          an array of SHAPE ("2,3"; "" for a scalar) with
                                          every element FILL ("0.5", "nan", "inf"), dtype
                                          DESCR ("<f4", "<f8", "<i4", ">f4")
  npy_tool.py shape A.npy                 prints the shape, "2,6,4"
"""
import ast
import math
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path + " is not a .npy file"
    major = data[6]
    length_bytes = 2 if major == 1 else 4
    length = int.from_bytes(data[8:8 + length_bytes], "little")
    start = 8 + length_bytes
    header = ast.literal_eval(data[start:start + length].decode("latin1"))
    return header, data[start + length:]


def write(path, descr, shape, payload, fortran=False):
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, repr(tuple(shape)))
    # Pad so the values start at a multiple of 64 bytes, ending the header with a newline.
    total = 10 + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + payload)


def same(a, b):
    try:
        import numpy
    except ImportError:  # without NumPy: the same bytes
        with open(a, "rb") as fa, open(b, "rb") as fb:
            return fa.read() == fb.read()
    x, y = numpy.load(a), numpy.load(b)
    return x.dtype == y.dtype and x.shape == y.shape and numpy.array_equal(x, y, equal_nan=True)


def main(argv):
    command = argv[1]
    if command == "same":
        return 0 if same(argv[2], argv[3]) else 1
    if command == "shape":
        header, _ = read(argv[2])
        print(",".join(str(n) for n in header["shape"]))
        return 0
    if command == "widen":
        header, payload = read(argv[2])
        assert header["descr"] == "<f4", argv[2] + " is not float32"
        values = struct.unpack("<%df" % (len(payload) // 4), payload)
        write(argv[3], "<f8", header["shape"], struct.pack("<%dd" % len(values), *values))
        return 0
    if command == "write":
        path, descr, shape_text, fill = argv[2:6]
        shape = [int(n) for n in shape_text.split(",") if n]
        count = math.prod(shape)
        code = {"<f4": "<f", "<f8": "<d", "<i4": "<i", ">f4": ">f"}[descr]
        value = int(float(fill)) if code.endswith("i") else float(fill)
        write(path, descr, shape, struct.pack(code[0] + str(count) + code[1], *([value] * count)), "--fortran" in argv)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
