#!/usr/bin/env bash
# `tvlab moe` end to end: its own options and bad values of them.
#   tests/09_mixture_of_experts/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

check "moe --step" 0 "" -- "$tvlab" moe --step --backend ref
grep -q "Step 7" "$tmp/out" && pass "--step prints seven steps" || fail "--step does not print step 7"
check "moe --shared 1 --step, every backend" 0 "" -- "$tvlab" moe --shared 1 --step --backend all
check "moe: top-k above the experts names the option" 2 "--top-k (5)" -- "$tvlab" moe --experts 4 --top-k 5
check "moe: zero tokens names the option" 2 "--tokens" -- "$tvlab" moe --tokens 0
check "moe --dump" 0 "" -- "$tvlab" moe --backend ref --dump "$tmp/npy"
is_npy "$tmp"/npy/{x,moe_experts_ref}.npy

[ "$failures" -eq 0 ]
