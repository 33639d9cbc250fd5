#!/usr/bin/env bash
# The template's acceptance test: chapters/_template, tests/_template and exercises/_template
# copied to a new chapter number and name, with no other edit, must give a chapter that builds,
# appears in `tvlab list` and `tvlab tour`, and whose tests and exercise tests run under ctest
# (the tests pass; the exercise tests fail with NotImplemented, as unsolved exercises do).
# The copies are removed afterwards and the build brought back to the tree as it was.
#   scripts/check_template.sh [build dir, default build/default]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/default}
name=99_template_check
jobs=$(nproc 2>/dev/null || echo 2)
for part in chapters tests exercises; do
  if [ -e "$part/$name" ]; then echo "$part/$name exists: remove it first"; exit 1; fi
done
cleanup() {
  rm -rf "chapters/$name" "tests/$name" "exercises/$name" "$build"/tests/test_"$name"* "$build"/chapters/bench_"$name"
  cmake --build "$build" -j "$jobs" > /dev/null 2>&1
}
trap cleanup EXIT
cp -r chapters/_template "chapters/$name"
cp -r tests/_template "tests/$name"
cp -r exercises/_template "exercises/$name"

echo "--- build with $name added (the globs find it; nothing else edited)"
cmake --build "$build" -j "$jobs" > "$build/check_template.log" 2>&1 || { tail -40 "$build/check_template.log"; exit 1; }
tvlab=$build/chapters/tvlab
"$tvlab" list --names | grep -qx "$name" && echo "ok   tvlab list names $name" || { echo "FAIL tvlab list does not name $name"; exit 1; }
"$tvlab" tour --chapter "$name" > "$build/check_template_tour.txt" || { cat "$build/check_template_tour.txt"; echo "FAIL tvlab tour"; exit 1; }
grep -q "^$name:" "$build/check_template_tour.txt" && echo "ok   tvlab tour runs $name" || { echo "FAIL tvlab tour does not run $name"; exit 1; }

echo "--- its tests (label ch99) pass"
ctest --test-dir "$build" -L '^ch99' --no-tests=error --output-on-failure -j "$jobs" > "$build/check_template_tests.log" 2>&1 || \
  { tail -40 "$build/check_template_tests.log"; echo "FAIL the tests of $name"; exit 1; }
grep "tests passed" "$build/check_template_tests.log"

echo "--- its exercise tests (label exercise-99) run and fail with NotImplemented"
ctest --test-dir "$build" -L '^exercise-99$' --no-tests=error --output-on-failure -j "$jobs" > "$build/check_template_exercises.log" 2>&1 && \
  { echo "FAIL the exercise tests passed against the stubs"; exit 1; }
count=$(grep -c "not implemented: exercise 99.1" "$build/check_template_exercises.log" || true)
[ "$count" -gt 0 ] && echo "ok   the exercise tests fail with NotImplemented ($count failures)" || \
  { echo "FAIL the exercise tests did not fail with NotImplemented"; tail -30 "$build/check_template_exercises.log"; exit 1; }
echo "the template makes a working chapter"
