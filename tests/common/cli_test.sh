#!/usr/bin/env bash
# End-to-end checks of the `tvlab` command that hold for every chapter: usage and bad input give
# one line on stderr and exit status 2; list, tour, --json, --dump and --backend list do what the
# README says. Each chapter's own options are checked by tests/NN_<topic>/cli_test.sh.
#   tests/common/cli_test.sh path/to/tvlab              the command as a whole (list, tour, --threads)
#   tests/common/cli_test.sh path/to/tvlab NN_<topic>   the standard options of one chapter
source "$(dirname "$0")/cli_lib.sh"
chapter=${2:-}

if [ -n "$chapter" ]; then
  check "list --names" 0 "" -- "$tvlab" list --names
  grep -qx "$chapter" "$tmp/out" && pass "list names $chapter" || fail "list does not name $chapter"
  name=$chapter
  check "$name runs" 0 "" -- "$tvlab" "$name"
  check "$name --seed after the chapter name" 0 "" -- "$tvlab" "$name" --seed 9 --backend ref
  check "$name --backend list" 0 "" -- "$tvlab" "$name" --backend list
  grep -q "^ *ref " "$tmp/out" && pass "$name: --backend list names ref" || fail "$name: --backend list does not name ref"
  check "$name: unknown backend names the option" 2 "--backend" -- "$tvlab" "$name" --backend no_such_backend
  check "$name --json" 0 "" -- "$tvlab" --format json "$name" --backend ref
  json_chapter_is "$name"
  check "$name --markdown" 0 "" -- "$tvlab" "$name" --markdown
  grep -q "^# " "$tmp/out" && pass "$name --markdown starts with a title" || fail "$name --markdown has no title"
  check "$name --dump" 0 "" -- "$tvlab" "$name" --backend ref --dump "$tmp/dump_$name"
  ls "$tmp/dump_$name"/*.npy > /dev/null 2>&1 && is_npy "$tmp/dump_$name"/*.npy || fail "$name --dump wrote no .npy file"
  check "$name --threads below 0 is refused" 2 "--threads" -- "$tvlab" "$name" --threads -1
  [ "$failures" -eq 0 ]
  exit
fi

check "list" 0 "" -- "$tvlab" list
check "list --names" 0 "" -- "$tvlab" list --names
mapfile -t chapters < "$tmp/out"
[ "${#chapters[@]}" -gt 0 ] && pass "list names ${#chapters[@]} chapters" || fail "list names no chapter"
here=$(cd "$(dirname "$0")/../.." && pwd)
for dir in "$here"/chapters/[0-9][0-9]_*/; do
  name=$(basename "$dir")
  printf '%s\n' "${chapters[@]}" | grep -qx "$name" && pass "list names $name" || fail "list does not name $name"
done
check "tour agrees (with --threads 2)" 0 "" -- "$tvlab" --threads 2 tour
for name in "${chapters[@]}"; do
  grep -q "^$name:" "$tmp/out" && pass "tour runs $name" || fail "tour does not run $name"
done
check "no subcommand" 2 "subcommand" -- "$tvlab"
check "--threads beyond 4 per core is refused" 2 "--threads" -- "$tvlab" --threads 65535 tour

[ "$failures" -eq 0 ]
