#!/usr/bin/env bash
# What the command-line tests share: `check` runs a command and asserts its exit status and,
# for errors, one line on stderr naming the option; `is_npy` and `is_svg` check written files.
# A test script sources this file with the path of `tvlab` as its first argument.
set -u
tvlab=$1
# These tests check what the command does, not how fast: one OpenBLAS thread spares each of the
# few hundred runs starting a thread pool, and Python without site packages (these scripts use
# the standard library only) starts in half the time.
export OPENBLAS_NUM_THREADS=1
python3() { command python3 -I -S "$@"; }
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

npy_tool() { python3 "$(dirname "${BASH_SOURCE[0]}")/npy_tool.py" "$@"; }

# check_load_round_trip ALIAS ARGS...: `tvlab ALIAS ARGS --dump`, then the same command with
# --load of that dump and another --seed (so nothing random can stand in for the files): every
# file the first run wrote, the second writes the same (the same inputs give the same outputs).
# Then the inputs again as float64, which --load rounds back to the same float32 values.
# Leaves the first dump in $tmp/first. Both runs' files come from tvlab's one .npy writer, so
# the same array is the same bytes: `cmp` compares them.
check_load_round_trip() {
  local alias=$1
  shift
  rm -rf "$tmp/first" "$tmp/second" "$tmp/wide" "$tmp/third"
  check "$alias: dump" 0 "" -- "$tvlab" "$alias" "$@" --dump "$tmp/first"
  check "$alias: load the dump" 0 "" -- "$tvlab" "$alias" "$@" --seed 7 --load "$tmp/first" --dump "$tmp/second"
  local f name differ=0
  for f in "$tmp"/first/*.npy; do
    name=$(basename "$f")
    cmp -s "$f" "$tmp/second/$name" || { fail "$alias --load: $name differs from the dumped run's"; differ=1; }
  done
  [ "$differ" -eq 0 ] && pass "$alias --load: the $(ls "$tmp"/first | wc -l) files of the dump written again, the same"
  # float32 files become float64 (the inputs, and the outputs that do not matter here)
  npy_tool widen-folder "$tmp/first" "$tmp/wide" || fail "$alias: widening the dump to float64"
  check "$alias: load float64 inputs" 0 "" -- "$tvlab" "$alias" "$@" --load "$tmp/wide" --dump "$tmp/third"
  differ=0
  for f in "$tmp"/second/*_*.npy; do
    name=$(basename "$f")
    case "$name" in step_*) continue ;; esac
    cmp -s "$f" "$tmp/third/$name" || { fail "$alias --load of float64: $name differs"; differ=1; }
  done
  [ "$differ" -eq 0 ] && pass "$alias --load of float64 inputs: the same outputs"
}

# check_load_errors ALIAS NAME ARGS...: --load of the dump in $tmp/first with NAME.npy broken in
# every way (NAME: an input whose shape the first file fixes): each is one line naming the file.
check_load_errors() {
  local alias=$1 name=$2
  shift 2
  local shape
  shape=$(npy_tool shape "$tmp/first/$name.npy")
  broken() {  # a copy of the dump in $tmp/bad, NAME.npy to be replaced
    rm -rf "$tmp/bad"
    cp -r "$tmp/first" "$tmp/bad"
    rm -f "$tmp/bad/$name.npy"
  }
  # The loaded arrays set the sizes, so a run too large is refused naming --load, not --seq.
  check "$alias --load under --max-memory 1 (byte) names --load" 2 "^tvlab: --load: this run needs .*load smaller arrays" -- \
    "$tvlab" --max-memory 1 "$alias" "$@" --load "$tmp/first"
  check "$alias --load: no such folder" 2 "--load: $tmp/none is not a folder" -- "$tvlab" "$alias" "$@" --load "$tmp/none"
  check "$alias --load: a file, not a folder" 2 "is not a folder" -- "$tvlab" "$alias" "$@" --load "$tmp/first/$name.npy"
  broken
  check "$alias --load: $name.npy missing" 2 "$name.npy does not exist" -- "$tvlab" "$alias" "$@" --load "$tmp/bad"
  mkdir "$tmp/bad/$name.npy"
  check "$alias --load: $name.npy a folder" 2 "$name.npy is not a regular file" -- "$tvlab" "$alias" "$@" --load "$tmp/bad"
  broken
  echo "not an array" > "$tmp/bad/$name.npy"
  check "$alias --load: $name.npy not a .npy" 2 "$name.npy is not a .npy file" -- "$tvlab" "$alias" "$@" --load "$tmp/bad"
  broken
  head -c 140 "$tmp/first/$name.npy" > "$tmp/bad/$name.npy"
  check "$alias --load: $name.npy cut short" 2 "$name.npy has .* bytes of values" -- "$tvlab" "$alias" "$@" --load "$tmp/bad"
  # The broken arrays, each in its own copy of the dump, written by one Python process.
  local variant
  for variant in int32 big_endian fortran nan huge rank shape; do
    rm -rf "$tmp/bad_$variant"
    cp -r "$tmp/first" "$tmp/bad_$variant"
  done
  npy_tool write "$tmp/bad_int32/$name.npy" "<i4" "$shape" 1 + "$tmp/bad_big_endian/$name.npy" ">f4" "$shape" 1 \
    + "$tmp/bad_fortran/$name.npy" "<f4" "$shape" 1 --fortran + "$tmp/bad_nan/$name.npy" "<f4" "$shape" nan \
    + "$tmp/bad_huge/$name.npy" "<f8" "$shape" 1e300 + "$tmp/bad_rank/$name.npy" "<f4" "$shape,1" 1 \
    + "$tmp/bad_shape/$name.npy" "<f4" "${shape%,*},$((${shape##*,} + 1))" 1
  check "$alias --load: $name.npy of int32" 2 "$name.npy holds dtype '<i4', expected float32" -- "$tvlab" "$alias" "$@" --load "$tmp/bad_int32"
  check "$alias --load: $name.npy big-endian" 2 "$name.npy holds dtype '>f4'" -- "$tvlab" "$alias" "$@" --load "$tmp/bad_big_endian"
  check "$alias --load: $name.npy in Fortran order" 2 "$name.npy is stored in Fortran order" -- "$tvlab" "$alias" "$@" --load "$tmp/bad_fortran"
  check "$alias --load: $name.npy with NaN" 2 "$name.npy has a non-finite value (nan" -- "$tvlab" "$alias" "$@" --load "$tmp/bad_nan"
  check "$alias --load: $name.npy beyond float32" 2 "$name.npy has a non-finite value (1e+300 is beyond" -- "$tvlab" "$alias" "$@" --load "$tmp/bad_huge"
  check "$alias --load: $name.npy of another rank" 2 "$name.npy has shape \[$(echo "$shape" | sed 's/,/, /g'), 1\]" -- "$tvlab" "$alias" "$@" --load "$tmp/bad_rank"
  check "$alias --load: $name.npy of another shape" 2 "$name.npy has shape .*, expected" -- "$tvlab" "$alias" "$@" --load "$tmp/bad_shape"
}
