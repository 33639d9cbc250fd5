#!/usr/bin/env bash
# What the command-line tests share: `check` runs a command and asserts its exit status and,
# for errors, one line on stderr naming the option; `is_npy` and `is_svg` check written files.
# A test script sources this file with the path of `tvlab` as its first argument.
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


fail() { echo "FAIL $*"; failures=$((failures + 1)); }
pass() { echo "ok   $*"; }

is_npy() {  # is_npy FILE...: each exists and starts with numpy's magic string
  local f
  for f in "$@"; do
    if [ -s "$f" ] && head -c 6 "$f" | grep -q NUMPY; then pass "$(basename "$f")"; else fail "$f missing or not a .npy file"; fi
  done
}

is_svg() {  # is_svg FILE...: each parses as an SVG document
  local f
  for f in "$@"; do
    if python3 -c 'import sys, xml.etree.ElementTree as E; assert E.parse(sys.argv[1]).getroot().tag.endswith("svg")' "$f"; then
      pass "$(basename "$f") parses as SVG"; else fail "$f is not an SVG document"; fi
  done
}

json_chapter_is() {  # json_chapter_is NAME: the last command printed JSON whose "chapter" is NAME
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["chapter"] == sys.argv[2]' "$tmp/out" "$1" \
    && pass "json parses ($1)" || fail "json of $1 does not parse or names another chapter"
}

check_mask_options() {  # check_mask_options ALIAS: --causal, --causal-align and --window of an attention command
  local alias=$1
  check "$alias --window L,R with top-left causal" 0 "" -- "$tvlab" "$alias" --causal --causal-align top-left --window 2,1 --seq 9 --backend all
  grep -q "window 2 back and 1 ahead (top-left)" "$tmp/out" && pass "$alias: the title names the mask" || fail "$alias: the title does not name the mask"
  check "$alias: a malformed --window names the option" 2 "--window" -- "$tvlab" "$alias" --window 3,x
  check "$alias: a negative --window names the option" 2 "--window" -- "$tvlab" "$alias" --window -1
  check "$alias: an unknown --causal-align names the option" 2 "--causal-align" -- "$tvlab" "$alias" --causal --causal-align middle
}
