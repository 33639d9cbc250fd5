#!/usr/bin/env bash
# End-to-end checks of the `tvlab` command: usage and bad input give one line on stderr and exit
# status 2; list, tour, --json and --dump do what the README says.
#   tests/common/cli_test.sh path/to/tvlab
set -u
tvlab=$1
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() {  # check "<what>" <expected status> <text stderr must contain> -- command...
  local what=$1 want=$2 needle=$3
  shift 4
  "$@" > "$tmp/out" 2> "$tmp/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL $what: exit status $got, expected $want"; cat "$tmp/err"; failures=$((failures + 1)); return
  fi
  if [ -n "$needle" ]; then
    if ! grep -q -- "$needle" "$tmp/err"; then
      echo "FAIL $what: stderr does not mention '$needle':"; cat "$tmp/err"; failures=$((failures + 1)); return
    fi
    if [ "$(wc -l < "$tmp/err")" -ne 1 ]; then
      echo "FAIL $what: expected one line on stderr, got:"; cat "$tmp/err"; failures=$((failures + 1)); return
    fi
  fi
  echo "ok   $what"
}

check "list" 0 "" -- "$tvlab" list
grep -q "00_attention_basics" "$tmp/out" && grep -q "01_normalization" "$tmp/out" && grep -q "02_position_encoding" "$tmp/out" && grep -q "04_flash_attention" "$tmp/out" \
  && echo "ok   list names the chapters" || { echo "FAIL list does not name the chapters"; failures=$((failures + 1)); }
check "tour agrees" 0 "" -- "$tvlab" tour
check "--heads 0 names the option" 2 "--heads" -- "$tvlab" attention --heads 0
check "causal with more queries than keys" 2 "seq_q" -- "$tvlab" attention --causal --seq 6 --seq-k 3 --step
check "unknown backend" 2 "--backend" -- "$tvlab" norm --backend gpu
check "negative eps" 2 "--eps" -- "$tvlab" norm --eps -1
check "not a number" 2 "--heads" -- "$tvlab" attention --heads abc
check "no subcommand" 2 "subcommand" -- "$tvlab"
check "seed after the chapter name" 0 "" -- "$tvlab" attention --seed 9 --backend opt
grep -q "seed 9" "$tmp/out" && echo "ok   the seed reached the chapter" \
  || { echo "FAIL --seed after the chapter name was ignored"; failures=$((failures + 1)); }
check "json output" 0 "" -- "$tvlab" --format json norm --backend ref
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["chapter"] == "01_normalization"' "$tmp/out" \
  && echo "ok   json parses" || { echo "FAIL json does not parse"; failures=$((failures + 1)); }
check "dump" 0 "" -- "$tvlab" attention --seq 5 --backend opt --dump "$tmp/npy"
for f in q k v scaled_dot_product_attention_opt; do
  if [ -s "$tmp/npy/$f.npy" ] && head -c 6 "$tmp/npy/$f.npy" | grep -q NUMPY; then echo "ok   $f.npy"; else
    echo "FAIL $f.npy missing or not a .npy file"; failures=$((failures + 1)); fi
done

check "attention --svg" 0 "" -- "$tvlab" attention --causal --seq 5 --backend ref --svg "$tmp/p.svg"
check "norm --svg" 0 "" -- "$tvlab" norm --svg "$tmp/depth.svg"
for f in p depth; do
  if python3 -c 'import sys, xml.etree.ElementTree as E; assert E.parse(sys.argv[1]).getroot().tag.endswith("svg")' "$tmp/$f.svg"; then
    echo "ok   $f.svg parses as SVG"; else echo "FAIL $f.svg is not an SVG document"; failures=$((failures + 1)); fi
done
cells=$(grep -c '<rect x=' "$tmp/p.svg")
[ "$cells" -eq 25 ] && echo "ok   p.svg has 5 x 5 cells" || { echo "FAIL p.svg has $cells cells, expected 25"; failures=$((failures + 1)); }
check "--svg of a large matrix" 2 "--svg" -- "$tvlab" attention --seq 100 --svg "$tmp/big.svg"
check "norm --svg validates its options" 2 "--eps" -- "$tvlab" norm --eps -1 --svg "$tmp/bad.svg"
check "unwritable --svg" 2 "--svg" -- "$tvlab" norm --svg "$tmp/no/such/dir/x.svg"

# Chapter 02 (alias rope).
check "rope --step" 0 "" -- "$tvlab" rope --step --backend opt
check "rope: unknown rope type names the option" 2 "--rope-type" -- "$tvlab" rope --rope-type bogus
check "rope: unknown layout" 2 "--layout" -- "$tvlab" rope --layout diagonal
check "rope: odd head_dim" 2 "--head-dim" -- "$tvlab" rope --head-dim 7
check "rope: factor below 1" 2 "--factor" -- "$tvlab" rope --rope-type linear --factor 0.5
check "rope: unknown figure" 2 "--figure" -- "$tvlab" rope --figure nope --svg "$tmp/r.svg"
check "rope json" 0 "" -- "$tvlab" rope --json --rope-type dynamic --seq 40 --original-length 16
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["chapter"] == "02_position_encoding"' "$tmp/out" \
  && echo "ok   rope json parses" || { echo "FAIL rope json does not parse"; failures=$((failures + 1)); }
check "rope dump" 0 "" -- "$tvlab" rope --backend opt --dump "$tmp/rope"
for f in q k v inv_freq apply_rope_opt attention_rope_opt attention_alibi_opt; do
  if [ -s "$tmp/rope/$f.npy" ] && head -c 6 "$tmp/rope/$f.npy" | grep -q NUMPY; then echo "ok   $f.npy"; else
    echo "FAIL $f.npy missing or not a .npy file"; failures=$((failures + 1)); fi
done
for figure in scaling decay; do
  check "rope --svg --figure $figure" 0 "" -- "$tvlab" rope --figure $figure --svg "$tmp/$figure.svg"
  if python3 -c 'import sys, xml.etree.ElementTree as E; assert E.parse(sys.argv[1]).getroot().tag.endswith("svg")' "$tmp/$figure.svg"; then
    echo "ok   $figure.svg parses as SVG"; else echo "FAIL $figure.svg is not an SVG document"; failures=$((failures + 1)); fi
done

# Chapter 04 (alias flash).
check "flash --step" 0 "" -- "$tvlab" flash --step --backend ref
check "flash: block 0 names the option" 2 "--block-k" -- "$tvlab" flash --block-k 0
check "flash: causal with a cuda backend skips it" 0 "" -- "$tvlab" flash --causal --seq 40 --backend all
check "flash --inputs bf16 (ref emulates, opt skips)" 0 "" -- "$tvlab" flash --inputs bf16 --seq 40 --block-q 16 --block-k 16 --backend all
check "flash --inputs fp16 with tiles the tensor-core kernel cannot take" 0 "" -- "$tvlab" flash --inputs fp16 --seq 40 --backend all
check "flash: an unknown --inputs names the option" 2 "--inputs" -- "$tvlab" flash --inputs fp8
check "flash json" 0 "" -- "$tvlab" flash --json --seq 33 --block-q 8 --block-k 5 --causal
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["chapter"] == "04_flash_attention"' "$tmp/out" \
  && echo "ok   flash json parses" || { echo "FAIL flash json does not parse"; failures=$((failures + 1)); }
check "flash dump" 0 "" -- "$tvlab" flash --backend opt --dump "$tmp/flash"
for f in q k v flash_attention_forward_opt lse_opt; do
  if [ -s "$tmp/flash/$f.npy" ] && head -c 6 "$tmp/flash/$f.npy" | grep -q NUMPY; then echo "ok   $f.npy"; else
    echo "FAIL $f.npy missing or not a .npy file"; failures=$((failures + 1)); fi
done
check "flash --svg" 0 "" -- "$tvlab" flash --svg "$tmp/io.svg"

[ "$failures" -eq 0 ]
