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
check "quant: an unknown type names the option" 2 "Q3_X" -- "$tvlab" quant --type Q3_X
check "quant: a float type is not a block type" 2 "--type" -- "$tvlab" quant --type F16
check "quant: cols not a multiple of 32" 2 "--cols (48)" -- "$tvlab" quant --cols 48
check "quant: zero rows names the option" 2 "--rows" -- "$tvlab" quant --rows 0
check "quant --dump" 0 "" -- "$tvlab" quant --backend opt --dump "$tmp/npy"
is_npy "$tmp"/npy/{x,bytes_opt,dequantize_opt}.npy

[ "$failures" -eq 0 ]
