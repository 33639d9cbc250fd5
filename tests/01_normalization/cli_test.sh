#!/usr/bin/env bash
# `tvlab norm` end to end: its own options, bad values of them, its figures and dumps.
#   tests/01_normalization/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

check "unknown backend" 2 "--backend" -- "$tvlab" norm --backend gpu
check "negative eps" 2 "--eps" -- "$tvlab" norm --eps -1
check "json output" 0 "" -- "$tvlab" --format json norm --backend ref
json_chapter_is 01_normalization
check "norm --svg" 0 "" -- "$tvlab" norm --svg "$tmp/depth.svg"
is_svg "$tmp/depth.svg"
check "norm --svg validates its options" 2 "--eps" -- "$tvlab" norm --eps -1 --svg "$tmp/bad.svg"
check "unwritable --svg" 2 "--svg" -- "$tvlab" norm --svg "$tmp/no/such/dir/x.svg"

check_load_round_trip norm --tokens 3 --d-model 16 --d-ff 24 --step
is_npy "$tmp"/first/{relu,gelu,gelu_tanh,silu}_ref.npy "$tmp/first/step_x_hat.npy"
check_load_errors norm gamma
check_load_errors norm w3
check "norm --load: a size option that disagrees" 2 "--d-ff: (32) disagrees with --load: w1.npy's dimension 1 (d_ff) is 24" -- \
  "$tvlab" norm --load "$tmp/first" --d-ff 32
check "norm --load: the sizes that agree" 0 "" -- "$tvlab" norm --load "$tmp/first" --tokens 3 --d-model 16 --d-ff 24

[ "$failures" -eq 0 ]
