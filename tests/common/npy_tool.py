#!/usr/bin/env python3
"""Small .npy helpers for the command-line tests of --dump and --load (standard library only).

  npy_tool.py widen-folder SRC DST        each float32 .npy of folder SRC written again as
                                          float64 (exact) into DST, the other files copied
  npy_tool.py write DST.npy DESCR SHAPE FILL [--fortran] [+ DST.npy DESCR SHAPE FILL ...]
                                          an array of SHAPE ("2,3"; "" for a scalar) with
                                          every element FILL ("0.5", "nan", "inf"), dtype
                                          DESCR ("<f4", "<f8", "<i4", ">f4"); "+" starts
                                          another file (one process for many: Python's start
                                          is most of the command-line tests' time)
  npy_tool.py shape A.npy                 prints the shape, "2,6,4"
"""
import ast
import math
import os
import shutil
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


def widen(source, destination):
    header, payload = read(source)
    assert header["descr"] == "<f4", source + " is not float32"
    values = struct.unpack("<%df" % (len(payload) // 4), payload)
    write(destination, "<f8", header["shape"], struct.pack("<%dd" % len(values), *values))


def write_filled(path, descr, shape_text, fill, fortran):
    shape = [int(n) for n in shape_text.split(",") if n]
    count = math.prod(shape)
    code = {"<f4": "<f", "<f8": "<d", "<i4": "<i", ">f4": ">f"}[descr]
    value = int(float(fill)) if code.endswith("i") else float(fill)
    write(path, descr, shape, struct.pack(code[0] + str(count) + code[1], *([value] * count)), fortran)


def main(argv):
    command = argv[1]
    if command == "shape":
        header, _ = read(argv[2])
        print(",".join(str(n) for n in header["shape"]))
        return 0
    if command == "widen-folder":
        os.makedirs(argv[3], exist_ok=True)
        for name in sorted(os.listdir(argv[2])):
            source, destination = os.path.join(argv[2], name), os.path.join(argv[3], name)
            if name.endswith(".npy") and read(source)[0]["descr"] == "<f4":
                widen(source, destination)
            else:
                shutil.copyfile(source, destination)
        return 0
    if command == "write":
        groups, group = [], []
        for word in argv[2:]:
            if word == "+":
                groups.append(group)
                group = []
            else:
                group.append(word)
        groups.append(group)
        for path, descr, shape_text, fill, *flags in groups:
            write_filled(path, descr, shape_text, fill, "--fortran" in flags)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
