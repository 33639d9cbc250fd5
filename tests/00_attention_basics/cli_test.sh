#!/usr/bin/env bash
# `tvlab attention` end to end: its own options, bad values of them, its figures and dumps.
#   tests/00_attention_basics/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

check "--heads 0 names the option" 2 "--heads" -- "$tvlab" attention --heads 0
check "causal with more queries than keys" 2 "seq_q" -- "$tvlab" attention --causal --seq 6 --seq-k 3 --step
check "not a number" 2 "--heads" -- "$tvlab" attention --heads abc
check "seed after the chapter name" 0 "" -- "$tvlab" attention --seed 9 --backend opt
grep -q "seed 9" "$tmp/out" && pass "the seed reached the chapter" || fail "--seed after the chapter name was ignored"
check "dump" 0 "" -- "$tvlab" attention --seq 5 --backend opt --dump "$tmp/npy"
is_npy "$tmp"/npy/{q,k,v,scaled_dot_product_attention_opt}.npy
check "attention --svg" 0 "" -- "$tvlab" attention --causal --seq 5 --backend ref --svg "$tmp/p.svg"
is_svg "$tmp/p.svg"
cells=$(grep -c '<rect x=' "$tmp/p.svg")
[ "$cells" -eq 25 ] && pass "p.svg has 5 x 5 cells" || fail "p.svg has $cells cells, expected 25"
check "--svg of a large matrix" 2 "--svg" -- "$tvlab" attention --seq 100 --svg "$tmp/big.svg"

check_mask_options attention

check_load_round_trip attention --seq 5 --seq-k 7 --heads 3 --head-dim 4 --causal --step
is_npy "$tmp"/first/{step_scores,step_weights}.npy
check_load_errors attention v --causal
check "attention --load: a size option that disagrees" 2 "--seq: (4) disagrees with --load: q.npy's dimension 1 (seq) is 5" -- \
  "$tvlab" attention --load "$tmp/first" --seq 4
check "attention --load: --seq-k that disagrees" 2 "--seq-k: (5) disagrees with --load: k.npy's dimension 1 (seq_k) is 7" -- \
  "$tvlab" attention --load "$tmp/first" --seq-k 5
check "attention --load: the sizes that agree" 0 "" -- "$tvlab" attention --load "$tmp/first" --heads 3 --seq 5 --seq-k 7 --head-dim 4

[ "$failures" -eq 0 ]
