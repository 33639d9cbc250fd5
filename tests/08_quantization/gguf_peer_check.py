#!/usr/bin/env python3
"""Chapter 08's GGUF files, read by llama.cpp's own Python package (gguf-py).

    build/py_venv/bin/python tests/08_quantization/gguf_peer_check.py build/default/chapters/tvlab

tvlab writes a GGUF file (`tvlab quant --write-gguf`: random weights as F32 and in Q8_0, Q5_1,
Q5_0, Q4_1, Q4_0 and the K-quants Q6_K, Q5_K, Q4_K, Q3_K, Q2_K) and dumps the values it reads back from it (`tvlab quant --gguf
--dump`). gguf-py then reads the same file and, for every tensor, checks that
  1. its reader finds the tensor's name, type and shape, and the metadata, as tvlab wrote them;
  2. its NumPy dequantizer gives tvlab's values, bit for bit;
  3. its NumPy quantizer, run on the F32 weights, gives tvlab's bytes, byte for byte (not for the
     K-quants: gguf-py can dequantize them but has no quantizer for them; their bytes are held to
     ggml's C code by scripts/ggml_quants_check.sh and the K-quant test instead).
Exit status 0 when all hold, 1 otherwise (each difference printed).
"""
import importlib.metadata
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf.quants import dequantize, quantize


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tvlab = sys.argv[1]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "demo.gguf")
        npy = os.path.join(tmp, "npy")
        rows, cols = 16, 512
        subprocess.run([tvlab, "--seed", "7", "quant", "--write-gguf", path, "--rows", str(rows), "--cols", str(cols)],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([tvlab, "quant", "--gguf", path, "--dump", npy], check=True, stdout=subprocess.DEVNULL)
        reader = gguf.GGUFReader(path)
        arch = reader.fields["general.architecture"]
        if bytes(arch.parts[arch.data[0]]).decode() != "tvlab-demo":
            print("general.architecture was not read back as written")
            failures += 1
        tensors = {t.name: t for t in reader.tensors}
        source = tensors["w.f32"].data.astype(np.float32)
        if source.shape != (rows, cols):
            print(f"w.f32 has shape {source.shape}, expected {(rows, cols)}")
            failures += 1
        k_quants = ["w.Q6_K", "w.Q5_K", "w.Q4_K", "w.Q3_K", "w.Q2_K"]
        for name in ["w.f32", "w.Q8_0", "w.Q5_1", "w.Q5_0", "w.Q4_1", "w.Q4_0"] + k_quants:
            if name not in tensors:
                print(f"{name}: not in tvlab's file")
                failures += 1
                continue
            t = tensors[name]
            kind = gguf.GGMLQuantizationType[name.split(".")[1].upper()]
            if t.tensor_type != kind or list(t.shape) != [cols, rows]:
                print(f"{name}: gguf-py reads type {t.tensor_type.name}, dimensions {list(t.shape)}")
                failures += 1
                continue
            theirs = dequantize(t.data, t.tensor_type).reshape(rows, cols)
            ours = np.load(os.path.join(npy, name + ".npy"))
            values_equal = np.array_equal(theirs.view(np.uint32), ours.astype(np.float32).view(np.uint32))
            if not values_equal:
                diff = np.abs(theirs.astype(np.float64) - ours)
                print(f"{name}: gguf-py's dequantized values differ from tvlab's in {np.count_nonzero(diff)} "
                      f"places (largest {diff.max():.3g})")
                failures += 1
            if name == "w.f32":
                continue
            if name in k_quants:
                if values_equal:
                    print(f"{name}: values equal to gguf-py's dequantizer; its bytes not compared (gguf-py has no "
                          f"{name[2:]} quantizer)")
                continue
            their_bytes = quantize(source, t.tensor_type)
            our_bytes = np.asarray(t.data).reshape(their_bytes.shape)
            if not np.array_equal(their_bytes, our_bytes):
                where = np.argwhere(their_bytes != our_bytes)[0]
                print(f"{name}: gguf-py's quantizer gives other bytes, first at (row, byte) {tuple(where)}: "
                      f"{their_bytes[tuple(where)]} against tvlab's {our_bytes[tuple(where)]}")
                failures += 1
            else:
                print(f"{name}: {our_bytes.size} bytes equal to gguf-py's quantizer; values equal to its dequantizer")
    print("gguf", importlib.metadata.version("gguf"), "numpy", np.__version__, ":", "ok" if failures == 0 else f"{failures} failures")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
