#!/usr/bin/env bash
# `tvlab linear` end to end: its own options and bad values of them.
#   tests/06_linear_attention/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

check "linear --step" 0 "" -- "$tvlab" linear --step --backend ref
grep -q "ranking k2 > k1 > k3" "$tmp/out" && pass "--step ranks the first example's keys" || fail "--step does not rank the first example"
grep -q "not softmax's" "$tmp/out" && pass "--step shows ReLU changing the second ranking" || fail "--step misses the changed ranking"
grep -q "replaced the first" "$tmp/out" && pass "--step shows the delta rule overwriting" || fail "--step misses the delta rule"
check "linear: zero chunk names the option" 2 "--chunk" -- "$tvlab" linear --chunk 0
check "linear: an unknown feature map" 2 "--feature-map" -- "$tvlab" linear --feature-map softmax
check "linear --feature-map relu" 0 "" -- "$tvlab" linear --feature-map identity --seq 7 --chunk 3
check "linear: zero Performer features names the option" 2 "--performer-features" -- "$tvlab" linear --performer-features 0
check "linear --performer-features" 0 "" -- "$tvlab" linear --performer-features 5 --backend opt --seq 70
grep -q "performer_causal" "$tmp/out" && pass "a run reports the causal Performer" || fail "a run misses the Performer"
check "linear --dump" 0 "" -- "$tvlab" linear --dump "$tmp/npy"
is_npy "$tmp"/npy/{q,k,v,causal_chunked_ref,performer_features_w,performer_ref}.npy

[ "$failures" -eq 0 ]
