#!/usr/bin/env bash
# `tvlab kv` end to end: its own options and bad values of them.
#   tests/NN_<topic>/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

check "example --step" 0 "" -- "$tvlab" kv --step --backend ref
grep -q "Step 4" "$tmp/out" && pass "--step prints four steps" || fail "--step does not print step 4"
check "example: zero rows names the option" 2 "--rows" -- "$tvlab" kv --rows 0
check "example --dump" 0 "" -- "$tvlab" kv --backend opt --dump "$tmp/npy"
is_npy "$tmp"/npy/{x,softmax_opt}.npy

[ "$failures" -eq 0 ]
