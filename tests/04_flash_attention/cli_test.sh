#!/usr/bin/env bash
# `tvlab flash` end to end: its own options, bad values of them, its figures and dumps.
#   tests/04_flash_attention/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

check "flash --step" 0 "" -- "$tvlab" flash --step --backend ref
check "flash: block 0 names the option" 2 "--block-k" -- "$tvlab" flash --block-k 0
check "flash: causal with a cuda backend skips it" 0 "" -- "$tvlab" flash --causal --seq 40 --backend all
check "flash --inputs bf16 (ref emulates, opt skips)" 0 "" -- "$tvlab" flash --inputs bf16 --seq 40 --block-q 16 --block-k 16 --backend all
check "flash --inputs fp16 with tiles the tensor-core kernel cannot take" 0 "" -- "$tvlab" flash --inputs fp16 --seq 40 --backend all
check "flash: an unknown --inputs names the option" 2 "--inputs" -- "$tvlab" flash --inputs fp8
check "flash json" 0 "" -- "$tvlab" flash --json --seq 33 --block-q 8 --block-k 5 --causal
json_chapter_is 04_flash_attention
check "flash dump" 0 "" -- "$tvlab" flash --backend opt --dump "$tmp/flash"
is_npy "$tmp"/flash/{q,k,v,flash_attention_forward_opt,lse_opt}.npy
check "flash --svg" 0 "" -- "$tvlab" flash --svg "$tmp/io.svg"

is_svg "$tmp/io.svg"

# The mask options (one specification for every attention command).
check "flash --window L,R with top-left causal" 0 "" -- "$tvlab" flash --causal --causal-align top-left --window 2,1 --seq 9 --backend all
grep -q "window 2 back and 1 ahead (top-left)" "$tmp/out" && pass "flash: the title names the mask" || fail "flash: the title does not name the mask"
check "flash: a malformed --window names the option" 2 "--window" -- "$tvlab" flash --window 3,x
check "flash: a negative --window names the option" 2 "--window" -- "$tvlab" flash --window -1
check "flash: an unknown --causal-align names the option" 2 "--causal-align" -- "$tvlab" flash --causal --causal-align middle

[ "$failures" -eq 0 ]
