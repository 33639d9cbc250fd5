#!/usr/bin/env bash
# `tvlab flash` end to end: its own options, bad values of them, its figures and dumps.
#   tests/04_flash_attention/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

check "flash --step" 0 "" -- "$tvlab" flash --step --backend ref
# With a mask, --step walks the last query row: hidden keys score -inf, a hidden tile is skipped,
# and the online result is the reference's row.
check "flash --step with a causal window" 0 "" -- "$tvlab" flash --step --backend ref --seq 8 --block-k 3 --window 2 --causal
grep -q "query 7 " "$tmp/out" && pass "--step with a mask walks the last query" || fail "--step with a mask does not walk query 7"
grep -q "key tile \[0, 3): every key hidden by the mask, skipped" "$tmp/out" && pass "--step skips the hidden tile" \
  || fail "--step does not skip the key tile the window hides"
online=$(grep -A1 "^O  \[1 x" "$tmp/out" | tail -1)
reference=$(grep -A1 "^ref::flash_attention_forward, row 7" "$tmp/out" | tail -1)
[ -n "$online" ] && [ "$online" = "$reference" ] && pass "--step's O is the reference's row 7" \
  || fail "--step's O ($online) is not the reference's row 7 ($reference)"
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

check_mask_options flash

check_load_round_trip flash --seq 6 --seq-k 9 --heads 2 --head-dim 4 --causal --step
is_npy "$tmp"/first/{dout,dq_ref,dk_ref,dv_ref,dq_opt,dk_opt,dv_opt,step_scores}.npy
[ "$(npy_tool shape "$tmp/first/dk_ref.npy")" = "2,9,4" ] && pass "dk has the keys' shape [2, 9, 4]" || fail "dk_ref.npy has shape $(npy_tool shape "$tmp/first/dk_ref.npy"), expected 2,9,4"
check_load_errors flash dout --causal
check "flash --load: a size option that disagrees" 2 "--seq-k: (8) disagrees with --load: k.npy's dimension 1 (seq_k) is 9" -- \
  "$tvlab" flash --load "$tmp/first" --seq-k 8
check "flash --seq-k: a negative count names the option" 2 "--seq-k" -- "$tvlab" flash --seq-k -1
check "flash --seq-k with more queries than keys, causal" 2 "seq_q" -- "$tvlab" flash --causal --seq 6 --seq-k 3

[ "$failures" -eq 0 ]
