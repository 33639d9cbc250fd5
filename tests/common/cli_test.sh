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
  # (--markdown itself is results.md: `make check-results` runs it for every chapter and compares.)
  check "$name --dump" 0 "" -- "$tvlab" "$name" --backend ref --dump "$tmp/dump_$name"
  ls "$tmp/dump_$name"/*.npy > /dev/null 2>&1 && is_npy "$tmp/dump_$name"/*.npy || fail "$name --dump wrote no .npy file"
  check "$name --threads below 0 is refused" 2 "--threads" -- "$tvlab" "$name" --threads -1
  # Output formats: one at a time; --step is text.
  check "$name --json --markdown is refused" 2 "--markdown" -- "$tvlab" "$name" --json --markdown
  check "$name --format json with --markdown is refused" 2 "--markdown" -- "$tvlab" --format json "$name" --markdown
  check "$name --json --step is refused" 2 "--step" -- "$tvlab" "$name" --json --step
  check "$name --dump '' is refused" 2 "--dump" -- "$tvlab" "$name" --dump ""
  # A run that cannot fit is refused before it starts, naming an option of the chapter.
  check "$name under --max-memory 1 (byte) is refused" 2 "memory" -- "$tvlab" --max-memory 1 "$name" --backend ref
  grep -q "^tvlab: --[a-z-]*: this run needs" "$tmp/err" && pass "$name: the refusal names the option to change" \
    || fail "$name: the memory refusal does not start with the option: $(cat "$tmp/err")"
  # A backend asked for by name that cannot run here is an error, and nothing is written.
  while read -r backend _ notes; do
    case "$notes" in
      *"cannot run here"*)
        check "$name --backend $backend (cannot run here)" 2 "--backend" -- "$tvlab" "$name" --backend "$backend" --dump "$tmp/none_$name"
        [ ! -e "$tmp/none_$name" ] && pass "$name: nothing dumped for $backend" || fail "$name: --dump wrote files for $backend, which did not run";;
    esac
  done < <("$tvlab" "$name" --backend list)
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
check "no subcommand" 2 "subcommand" -- "$tvlab"
check "an unknown chapter is named, with the list" 2 "unknown chapter or command 'no_such_chapter'" -- "$tvlab" no_such_chapter
grep -q "${chapters[0]}" "$tmp/err" && pass "the error lists the chapters" || fail "the error does not list the chapters"
check "--seed -1 is refused" 2 "--seed" -- "$tvlab" --seed -1 list
check "--seed 2^64 is refused" 2 "--seed" -- "$tvlab" --seed 18446744073709551616 list
check "--seed 2^64 - 1 is accepted" 0 "" -- "$tvlab" --seed 18446744073709551615 list --names
check "global options after list" 0 "" -- "$tvlab" list --seed 3 --names
check "--max-memory must be a size" 2 "--max-memory" -- "$tvlab" --max-memory lots list
check "--time-limit must be positive" 2 "--time-limit" -- "$tvlab" --time-limit 0 list
check "list as JSON" 0 "" -- "$tvlab" --format json list
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [c["name"] for c in d["chapters"]] == sys.argv[2:]' \
  "$tmp/out" "${chapters[@]}" && pass "list --format json names the chapters" || fail "list --format json is not the chapter list"
# The tour (once: it runs every chapter), as JSON, with global options after it.
check "tour agrees" 0 "" -- "$tvlab" tour --format json --threads 2
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["all_agree"] is True
assert [c["name"] for c in d["chapters"]] == sys.argv[2:] and all(c["agreements"] for c in d["chapters"])' \
  "$tmp/out" "${chapters[@]}" && pass "tour runs every chapter, and they agree" || fail "tour --format json does not parse, misses a chapter or disagrees"
check "--threads beyond 4 per core is refused" 2 "--threads" -- "$tvlab" --threads 65535 tour
last=${chapters[${#chapters[@]}-1]}
check "tour --chapter $last" 0 "" -- "$tvlab" tour --chapter "$last"
[ "$(grep -c '^[0-9][0-9]_[a-z_]*: ' "$tmp/out")" -eq 1 ] && grep -q "^$last: " "$tmp/out" \
  && pass "tour --chapter runs that chapter alone" || fail "tour --chapter $last does not run $last alone"
check "tour --chapter of no chapter is refused" 2 "--chapter" -- "$tvlab" tour --chapter no_such_chapter

[ "$failures" -eq 0 ]
