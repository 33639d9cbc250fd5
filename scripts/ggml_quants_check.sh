#!/usr/bin/env bash
# Chapter 08's block formats against ggml's own C code: fetches ggml's sources (vendored in the
# sdist of the PyPI package ggml-python, pinned below with its sha256), compiles ggml-quants.c
# unchanged with scripts/ggml_quants_check.c (a small program that runs its quantize_row_*_ref and
# dequantize_row_* on fixed data sets and prints the hashes of what they give), and checks that
# each hash is the one tests/08_quantization/kquant_test.cpp holds tvlab to. So the test's golden
# numbers are ggml's, not a transcription's.
#
#   scripts/ggml_quants_check.sh            fetch (once, cached in build/ggml_src), build, run, compare
#   scripts/ggml_quants_check.sh --print    only print the table of hashes
#   scripts/ggml_quants_check.sh --fetch    only fetch and check the archive (`make deps` runs this)
#
# Needs pip (network access to PyPI the first time) and a C compiler; about 3.4 MB to download.
set -euo pipefail
cd "$(dirname "$0")/.."
package=ggml-python
version=0.0.45
archive=ggml_python-$version.tar.gz
sha256=10aac52075cf3c7ef2b00d6c35b1c23f7b018dbeff8ae8df67339b4be1166f05
cache=build/ggml_src
src=$cache/ggml_python-$version/vendor/ggml
bin=$cache/ggml_quants_check
test_file=tests/08_quantization/kquant_test.cpp

mkdir -p "$cache"
if [ ! -f "$cache/$archive" ]; then
  # pip prepares the sdist's metadata (it fetches the package's build backend for that), but
  # builds nothing: only the archive is kept
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    "$package==$version" -d "$cache" || {
    echo "ggml_quants_check.sh: pip could not download $package==$version (is PyPI reachable?)" >&2
    exit 1
  }
fi
echo "$sha256  $cache/$archive" | sha256sum --check --quiet || {
  echo "ggml_quants_check.sh: $cache/$archive does not have the pinned sha256 $sha256" >&2
  exit 1
}
[ "${1:-}" = --fetch ] && exit 0
# only what ggml-quants.c includes (and the version in CMakeLists.txt)
needed="CMakeLists.txt src/ggml-quants.c src/ggml-quants.h src/ggml-common.h src/ggml-impl.h src/ggml-cpu/ggml-cpu-impl.h
  include/ggml.h include/ggml-cpu.h include/ggml-backend.h include/ggml-alloc.h include/gguf.h"
for f in $needed; do
  if [ ! -f "$src/$f" ]; then
    tar -xzf "$cache/$archive" -C "$cache" $(for g in $needed; do echo "ggml_python-$version/vendor/ggml/$g"; done)
    break
  fi
done
# -ffp-contract=off: no fused multiply-adds, as tvlab's block code is compiled (and as ggml's is on
# a machine without them); asserts on (no -DNDEBUG), so that ggml's nearest_int checks its range
if [ ! -x "$bin" ] || [ scripts/ggml_quants_check.c -nt "$bin" ]; then
  ${CC:-cc} -O2 -ffp-contract=off -std=gnu11 -I"$src/src" -I"$src/include" -I"$src/src/ggml-cpu" \
    "$src/src/ggml-quants.c" scripts/ggml_quants_check.c -lm -o "$bin"
fi
if [ "${1:-}" = --print ]; then
  "$bin"
  exit 0
fi

ggml_version=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))/\2/p' "$src/CMakeLists.txt" | paste -sd.)
echo "ggml $ggml_version (from $package $version, sha256 $sha256)"
failures=0 checked=0
while read -r data type _ bytes _ values; do
  for hash in "$bytes" "$values"; do
    checked=$((checked + 1))
    if grep -q "${hash}ull" "$test_file"; then
      echo "  $data $type: $hash in $test_file"
    else
      echo "  $data $type: $hash NOT in $test_file"
      failures=$((failures + 1))
    fi
  done
done < <("$bin")
echo "$((checked - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
