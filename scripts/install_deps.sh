#!/usr/bin/env bash
# Installs tvlab's build dependencies from Debian packages when they are missing.
# As root it runs apt-get; otherwise it prints the exact command and stops.
set -euo pipefail

packages=(cmake make ninja-build g++ python3 python3-venv ccache
          libxtensor-dev xtl-dev libxsimd-dev libxtensor-blas-dev libopenblas-dev
          libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
          doxygen graphviz libjs-mathjax openmpi-bin libopenmpi-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

command="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  $command
else
  echo "tvlab needs these Debian packages: ${missing[*]}" >&2
  echo "run:  sudo apt-get update && sudo $command" >&2
  exit 1
fi
