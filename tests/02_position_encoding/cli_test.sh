#!/usr/bin/env bash
# `tvlab rope` end to end: its own options, bad values of them, its figures and dumps.
#   tests/02_position_encoding/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

check "rope --step" 0 "" -- "$tvlab" rope --step --backend opt
check "rope: unknown rope type names the option" 2 "--rope-type" -- "$tvlab" rope --rope-type bogus
check "rope: unknown layout" 2 "--layout" -- "$tvlab" rope --layout diagonal
check "rope: odd head_dim" 2 "--head-dim" -- "$tvlab" rope --head-dim 7
check "rope: factor below 1" 2 "--factor" -- "$tvlab" rope --rope-type linear --factor 0.5
check "rope: unknown figure" 2 "--figure" -- "$tvlab" rope --figure nope --svg "$tmp/r.svg"
check "rope json" 0 "" -- "$tvlab" rope --json --rope-type dynamic --seq 40 --original-length 16
json_chapter_is 02_position_encoding
check "rope dump" 0 "" -- "$tvlab" rope --backend opt --dump "$tmp/rope"
is_npy "$tmp"/rope/{q,k,v,inv_freq,apply_rope_opt,attention_rope_opt,attention_alibi_opt}.npy
for figure in scaling decay; do
  check "rope --svg --figure $figure" 0 "" -- "$tvlab" rope --figure $figure --svg "$tmp/$figure.svg"
  is_svg "$tmp/$figure.svg"
done

[ "$failures" -eq 0 ]
