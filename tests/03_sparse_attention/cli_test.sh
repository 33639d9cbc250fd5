#!/usr/bin/env bash
# `tvlab sparse` end to end: every pattern and its options, bad values of each (one line naming
# the option, exit status 2), a layout read from a file, the figure, --dump and --load.
#   tests/03_sparse_attention/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

# Every pattern runs on every backend, and --step draws it.
check "sparse --step (a sliding window)" 0 "" -- "$tvlab" sparse --step
check "sparse: a causal window" 0 "" -- "$tvlab" sparse --causal --window 4 --step --backend all
grep -q "^  #####\.\.\.*$" "$tmp/out" && grep -q "sliding_window_attention" "$tmp/out" \
  && pass "the causal window's row 4 has w + 1 = 5 keys, and sliding_window_attention ran" \
  || fail "the causal window's grid or its sliding-window run is missing"
check "sparse: dilated, one dilation per head" 0 "" -- "$tvlab" sparse --pattern dilated --dilation 1,2 --heads 2 --step
check "sparse: strided" 0 "" -- "$tvlab" sparse --pattern strided --stride 4 --step
check "sparse: strided, factorized over two heads" 0 "" -- "$tvlab" sparse --pattern strided --stride 4 --factorized --heads 2
check "sparse: fixed with two summary columns" 0 "" -- "$tvlab" sparse --pattern fixed --stride 8 --summary 2 --step
check "sparse: longformer" 0 "" -- "$tvlab" sparse --pattern longformer --seq 24 --window 2 --globals 0,11 --step
grep -q "^  ########################$" "$tmp/out" && pass "longformer: a global row is full (24 keys)" \
  || fail "longformer: no full row in the grid"
check "sparse: bigbird" 0 "" -- "$tvlab" sparse --pattern bigbird --seq 64 --block 8 --global-blocks 2 --random-blocks 1 --step
check "sparse: full, causal" 0 "" -- "$tvlab" sparse --pattern full --causal --seq 20
check "sparse: a larger window on every backend" 0 "" -- "$tvlab" sparse --seq 300 --head-dim 32 --window 40 --block 32 --backend all
check "sparse --row" 0 "" -- "$tvlab" sparse --step --row 0
grep -q "row i = 0 of head 0: its 4 keys" "$tmp/out" && pass "--row 0 works through row 0 (keys 0..3)" \
  || fail "--row 0 did not work through row 0"
check "sparse --json" 0 "" -- "$tvlab" sparse --json --pattern longformer --globals 3
json_chapter_is 03_sparse_attention

# A block layout from a file: one line per query block, '#' computed, '.' skipped.
printf '##..\n###.\n.###\n#.##\n' > "$tmp/layout.txt"
check "sparse --layout" 0 "" -- "$tvlab" sparse --layout "$tmp/layout.txt" --seq 32 --block 8 --step --backend all
grep -q "^  #.##$" "$tmp/out" && pass "--step prints the file's layout" || fail "--step does not print the file's layout"
check "sparse --layout: a file that does not exist" 2 "--layout" -- "$tvlab" sparse --layout "$tmp/none.txt"
printf '##..\n###.\n.###\n' > "$tmp/short.txt"
check "sparse --layout: too few lines" 2 "--layout" -- "$tvlab" sparse --layout "$tmp/short.txt" --seq 32 --block 8
printf '##..\n###.\n.###\n#.##\n....\n' > "$tmp/long.txt"
check "sparse --layout: too many lines" 2 "--layout" -- "$tvlab" sparse --layout "$tmp/long.txt" --seq 32 --block 8
printf '##..\n###\n.###\n#.##\n' > "$tmp/narrow.txt"
check "sparse --layout: a line of the wrong length" 2 "--layout" -- "$tvlab" sparse --layout "$tmp/narrow.txt" --seq 32 --block 8
printf '##..\n#x#.\n.###\n#.##\n' > "$tmp/letters.txt"
check "sparse --layout: a character other than # and ." 2 "--layout" -- "$tvlab" sparse --layout "$tmp/letters.txt" --seq 32 --block 8
check "sparse --layout: a layout drawn for other blocks" 2 "--layout" -- "$tvlab" sparse --layout "$tmp/layout.txt" --seq 32 --block 4
check "sparse --pattern layout without --layout" 2 "--layout" -- "$tvlab" sparse --pattern layout
check "sparse --layout with another --pattern" 2 "--layout" -- "$tvlab" sparse --pattern window --layout "$tmp/layout.txt"

# Bad values: one line naming the option, exit status 2.
check "sparse: an unknown --pattern" 2 "--pattern" -- "$tvlab" sparse --pattern diagonal
check "sparse: a negative --window" 2 "--window" -- "$tvlab" sparse --window -1
check "sparse: --block 0" 2 "--block" -- "$tvlab" sparse --block 0
check "sparse: --seq 0" 2 "--seq" -- "$tvlab" sparse --seq 0
check "sparse: --heads 0" 2 "--heads" -- "$tvlab" sparse --heads 0
check "sparse: --head-dim 0" 2 "--head-dim" -- "$tvlab" sparse --head-dim 0
check "sparse: --stride 0" 2 "--stride" -- "$tvlab" sparse --pattern strided --stride 0
check "sparse: --summary 0" 2 "--summary" -- "$tvlab" sparse --pattern fixed --summary 0
check "sparse: --summary beyond --stride" 2 "--summary" -- "$tvlab" sparse --pattern fixed --stride 4 --summary 5
check "sparse: --dilation 0" 2 "--dilation" -- "$tvlab" sparse --pattern dilated --dilation 0
check "sparse: --dilation not a number" 2 "--dilation" -- "$tvlab" sparse --pattern dilated --dilation two
check "sparse: --dilation of 3 values for 2 heads" 2 "--dilation" -- "$tvlab" sparse --pattern dilated --dilation 1,2,3 --heads 2
check "sparse: a global position outside the sequence" 2 "--globals" -- "$tvlab" sparse --pattern longformer --globals 0,32
check "sparse: --globals not a list" 2 "--globals" -- "$tvlab" sparse --pattern longformer --globals 0,,3
check "sparse: a negative --global-blocks" 2 "--global-blocks" -- "$tvlab" sparse --pattern bigbird --global-blocks -1
check "sparse: more --global-blocks than blocks" 2 "--global-blocks" -- "$tvlab" sparse --pattern bigbird --global-blocks 5
check "sparse: a negative --random-blocks" 2 "--random-blocks" -- "$tvlab" sparse --pattern bigbird --random-blocks -1
check "sparse: more --random-blocks than there are to draw" 2 "--random-blocks" -- "$tvlab" sparse --pattern bigbird --seq 64 --random-blocks 4
check "sparse: bigbird with --seq not a multiple of --block" 2 "--seq" -- "$tvlab" sparse --pattern bigbird --seq 30
check "sparse: bigbird is not causal" 2 "--causal" -- "$tvlab" sparse --pattern bigbird --causal
check "sparse: --row beyond the sequence" 2 "--row" -- "$tvlab" sparse --step --row 32
check "sparse: a run too large is refused before it starts" 2 "--seq" -- "$tvlab" sparse --seq 2000000000 --window 100000

# The figure, the dump, and --load of the dump.
check "sparse --svg" 0 "" -- "$tvlab" sparse --svg "$tmp/patterns.svg"
is_svg "$tmp/patterns.svg"
check "sparse --svg into a folder that does not exist" 2 "--svg" -- "$tvlab" sparse --svg "$tmp/none/patterns.svg"
check "sparse --dump" 0 "" -- "$tvlab" sparse --backend ref --step --dump "$tmp/sparse"
is_npy "$tmp"/sparse/{q,k,v,block_sparse_attention_ref,sliding_window_attention_ref}.npy
[ "$(npy_tool shape "$tmp/sparse/step_scores.npy")" = "1,7" ] && pass "step_scores.npy holds the row's 7 scores" \
  || fail "step_scores.npy has shape $(npy_tool shape "$tmp/sparse/step_scores.npy"), expected 1,7"

check_load_round_trip sparse --seq 12 --heads 2 --head-dim 4 --window 2 --block 4 --step
check_load_errors sparse k --window 2
check "sparse --load: a size option that disagrees" 2 "--seq" -- "$tvlab" sparse --load "$tmp/first" --seq 8

[ "$failures" -eq 0 ]
