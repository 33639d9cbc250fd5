#!/usr/bin/env bash
# `tvlab quant` end to end: its own options and bad values of them.
#   tests/08_quantization/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

check "quant --step" 0 "" -- "$tvlab" quant --step --backend ref --type Q4_0
grep -q "Step 6" "$tmp/out" && pass "--step prints six steps" || fail "--step does not print step 6"
grep -q "little-endian" "$tmp/out" && pass "--step shows the fp16 scale's bytes" || fail "--step does not show the scale's bytes"
for type in Q8_0 Q5_1 Q5_0 Q4_1 q4_0; do
  check "quant --type $type, every backend" 0 "" -- "$tvlab" quant --type "$type" --backend all
done
for type in Q6_K Q5_K Q4_K Q3_K Q2_K; do
  check "quant --type $type --step, every backend" 0 "" -- "$tvlab" quant --type "$type" --cols 256 --step --backend all
done
for type in Q8_0 Q4_0 Q4_K; do
  check "quant --gemv --type $type --step, every backend" 0 "" -- "$tvlab" quant --gemv --type "$type" --cols 512 --step --backend all
done
check "quant --gemv: a type without a product names the option" 2 "--type (Q4_1)" -- "$tvlab" quant --gemv --type Q4_1
check "quant: a K-quant needs rows of 256" 2 "block of 256" -- "$tvlab" quant --type Q4_K --cols 64
check "quant: an unknown type names the option" 2 "Q3_X" -- "$tvlab" quant --type Q3_X
check "quant: a float type is not a block type" 2 "--type" -- "$tvlab" quant --type F16
check "quant: cols not a multiple of 32" 2 "--cols (48)" -- "$tvlab" quant --cols 48
check "quant: zero rows names the option" 2 "--rows" -- "$tvlab" quant --rows 0
check "quant --dump" 0 "" -- "$tvlab" quant --backend opt --dump "$tmp/npy"
is_npy "$tmp"/npy/{x,bytes_opt,dequantize_opt}.npy

# GGUF: a written file is listed and dumped; a damaged one is refused with the byte
check "quant --write-gguf" 0 "" -- "$tvlab" quant --write-gguf "$tmp/demo.gguf" --rows 4 --cols 256
check "quant --gguf --dump" 0 "" -- "$tvlab" quant --gguf "$tmp/demo.gguf" --dump "$tmp/gguf_npy"
grep -q "w.Q4_0: Q4_0, \[256 x 4\], 576 bytes" "$tmp/out" && pass "--gguf lists the tensors" || fail "--gguf does not list w.Q4_0"
is_npy "$tmp"/gguf_npy/{w.f32,w.Q8_0,w.Q4_0,w.Q2_K,w.Q3_K,w.Q4_K,w.Q5_K,w.Q6_K}.npy
check "quant --write-gguf: rows of 64 leave out the K-quants" 0 "" -- "$tvlab" quant --write-gguf "$tmp/small.gguf" --cols 64
check "quant --gguf, the small file" 0 "" -- "$tvlab" quant --gguf "$tmp/small.gguf"
grep -q "Q4_K" "$tmp/out" && fail "a 64-wide file lists a K-quant" || pass "a 64-wide file has no K-quant"
head -c 120 "$tmp/demo.gguf" > "$tmp/cut.gguf"
check "quant --gguf: a file cut short names the byte" 2 "at byte" -- "$tvlab" quant --gguf "$tmp/cut.gguf"
check "quant --gguf: a missing file" 2 "cannot open" -- "$tvlab" quant --gguf "$tmp/missing.gguf"

# llama.cpp's gguf-py reads the same file: its dequantizer gives tvlab's values, its quantizer
# tvlab's bytes (build/py_venv, made by scripts/python_env.sh, which `make test` runs)
python="$(dirname "$0")/../../build/py_venv/bin/python"
if [ -x "$python" ]; then
  check "gguf-py reads tvlab's GGUF file" 0 "" -- "$python" "$(dirname "$0")/gguf_peer_check.py" "$tvlab"
  cat "$tmp/out"
else
  fail "build/py_venv is missing: run scripts/python_env.sh (make test does) for the gguf-py comparison"
fi

# ggml's own C code (ggml-quants.c, fetched by `make deps`) gives the bytes and values the block
# tests hold tvlab to
check "ggml's quantize_row_*_ref and dequantize_row_* give the tests' hashes" 0 "" -- \
  bash "$(dirname "$0")/../../scripts/ggml_quants_check.sh"
tail -1 "$tmp/out"

[ "$failures" -eq 0 ]
