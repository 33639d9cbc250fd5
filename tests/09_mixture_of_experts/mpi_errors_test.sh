#!/usr/bin/env bash
# moe_mpi's bad settings under mpirun: exit status 2 and one line on stderr naming the parameter.
# Usage: mpi_errors_test.sh MPIRUN MOE_MPI
set -u
mpirun=$1
moe_mpi=$2
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect() {  # expect "<what>" <ranks> "<stderr pattern>" -- moe_mpi arguments...
  local what=$1 ranks=$2 needle=$3
  shift 4
  "$mpirun" --quiet --oversubscribe -np "$ranks" "$moe_mpi" "$@" > "$tmp/out" 2> "$tmp/err"
  local got=$?
  if [ "$got" -ne 2 ]; then
    echo "FAIL $what: exit status $got, expected 2"; cat "$tmp/err"; failures=$((failures + 1)); return
  fi
  if ! grep -q -- "$needle" "$tmp/err" || [ "$(wc -l < "$tmp/err")" -ne 1 ]; then
    echo "FAIL $what: expected one line on stderr with '$needle', got:"; cat "$tmp/err"; failures=$((failures + 1)); return
  fi
  echo "ok   $what: $(cat "$tmp/err")"
}
expect "3 ranks for 8 experts" 3 "moe_mpi: ranks (3) must divide num_experts (8)" -- --check
expect "top_k = E" 2 "moe_mpi: top_k (8) must be at least 1 and below num_experts (8)" -- --top-k 8
expect "max_ranks 0 is no limit, 3 > 2 ranks" 2 "moe_mpi: max_ranks (3) must be 0 (no limit) or in 1..ranks (2)" -- --max-ranks 3
expect "k beyond M ranks' experts" 4 "moe_mpi: top_k (3) is more than the 2 experts of max_ranks (1) ranks" -- --top-k 3 --max-ranks 1
expect "--bench's batch not split evenly" 4 "moe_mpi: --tokens (4095) must be a multiple of the rank count (4)" -- --bench --tokens 4095
expect "an unknown option" 1 "--nope" -- --nope
[ "$failures" -eq 0 ] && echo "all passed" || { echo "$failures failed"; exit 1; }
