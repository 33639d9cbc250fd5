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

[ "$failures" -eq 0 ]
